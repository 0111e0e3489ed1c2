"""Gemma-3 main model: configuration from GGUF metadata, weights, and one forward for any rows.

Owns: the decoder around its blocks (embedding scale, sliding-window and global layers with their
two RoPE bases, the final norm and the tied LM head), the attention context of a forward (RoPE
rows, cells to read, mask) and the eager forward of T rows. The block's math is block.py's.
Ignores: cache bookkeeping (cache/kv.py owns lengths, rollback, sessions), sampling, speculation,
the fused few-row kernels (fused.py).

One forward takes T new rows at absolute positions `pos[T]` (a prefill chunk, a 1-row decode, a
k+1-row verify) and writes their K/V into the static cache at cell = position. Attention reads the
cells named by a `key_pos` vector, so the same code serves the eager prefill path (python bounds)
and the captured decode/verify path (static shapes, positions live on the device).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import ModelFileError
from .block import BlockDims, attend, finish, project_qkv, rms_norm, rope_tables

SUPPORTED_ARCHS = ("gemma3",)


@dataclass(frozen=True)
class Gemma3Config:
    vocab_size: int
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    eps: float
    rope_global: float
    rope_local: float
    sliding_window: int
    sliding_pattern: int  # every sliding_pattern-th layer is global
    query_scale: float
    context_length: int

    @classmethod
    def from_metadata(cls, meta: dict, vocab_size: int) -> "Gemma3Config":
        arch = meta.get("general.architecture")
        if arch not in SUPPORTED_ARCHS:
            raise ModelFileError(f"unsupported architecture {arch!r} (supported: {', '.join(SUPPORTED_ARCHS)})")

        def get(key, default=None):
            v = meta.get(f"{arch}.{key}", default)
            if v is None:
                raise ModelFileError(f"GGUF metadata lacks {arch}.{key}")
            return v

        head_dim = int(get("attention.key_length", 256))
        return cls(
            vocab_size=vocab_size,
            hidden=int(get("embedding_length")),
            n_layers=int(get("block_count")),
            n_heads=int(get("attention.head_count")),
            n_kv_heads=int(get("attention.head_count_kv")),
            head_dim=head_dim,
            ffn=int(get("feed_forward_length")),
            eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
            rope_global=float(get("rope.freq_base", 1_000_000.0)),
            # Gemma-3 keeps 10k for local layers; GGUF has no key for it.
            rope_local=10_000.0,
            sliding_window=int(get("attention.sliding_window", 512)),
            sliding_pattern=6,
            query_scale=head_dim**-0.5,  # query_pre_attn_scalar = head_dim for the released sizes
            context_length=int(get("context_length", 32768)),
        )

    def is_global(self, layer: int) -> bool:
        return (layer + 1) % self.sliding_pattern == 0

    @property
    def block(self) -> BlockDims:
        return BlockDims(self.hidden, self.n_heads, self.n_kv_heads, self.head_dim, self.ffn, self.eps,
                         self.query_scale)


# GGUF tensor name per layer weight (llama.cpp's names for gemma3).
LAYER_TENSORS = {
    "attn_norm": "attn_norm",
    "q": "attn_q",
    "k": "attn_k",
    "v": "attn_v",
    "q_norm": "attn_q_norm",
    "k_norm": "attn_k_norm",
    "o": "attn_output",
    "post_attn_norm": "post_attention_norm",
    "ffn_norm": "ffn_norm",
    "gate": "ffn_gate",
    "up": "ffn_up",
    "down": "ffn_down",
    "post_ffn_norm": "post_ffw_norm",
}


@dataclass
class AttnContext:
    """What every layer of one attention type reads in a forward, built once per forward:
    RoPE rows of the query positions, the cells to read, and the mask over them."""

    cos: torch.Tensor  # [T, Dh]
    sin: torch.Tensor  # [T, Dh]
    key_pos: torch.Tensor | None  # [S] cells to read (< 0 = padding); None = every cell
    mask: torch.Tensor  # [T, S] bool, True = attend


class Gemma3:
    """Weights plus the forward. Linear weights are [out, in] dense tensors in `dtype`; q/k/v and
    gate/up are stored fused (one matrix read per row group) with the parts as views."""

    def __init__(self, cfg: Gemma3Config, weights: dict[str, torch.Tensor], device, dtype,
                 head_q8: tuple[torch.Tensor, torch.Tensor] | None = None, max_positions: int | None = None):
        """max_positions: positions the RoPE tables cover (default the model's context length;
        an engine passes its cache's, so a 4096-cell engine does not build 32768-row tables)."""
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        self.embed = weights["token_embd"]  # [V, D], also the tied LM head
        # the embedding's Q8_0 codes int8 [V, D] and scales fp16 [V, D / 32] as in the file: the fused
        # step's LM head reads them (models/fused.py), the MTP drafter takes its head rows from them
        # (models/mtp_load.py); embed is their dequantization
        if head_q8 is not None:
            assert head_q8[0].shape == self.embed.shape and head_q8[0].dtype == torch.int8, head_q8[0].shape
            assert head_q8[1].shape == (self.embed.shape[0], self.embed.shape[1] // 32), head_q8[1].shape
        self.head_q8 = head_q8
        self._head_pw = None  # head_q8 as a PackedWeight, made on first use (head_packed)
        self.out_norm = weights["output_norm"]
        self.layers = []
        nq, nkv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        # every layer's matrices of a kind live in one [n_layers, out, in] tensor (the layers hold
        # views): a persistent kernel over all layers (models/persistent_kernels.py) finds layer i's
        # at a fixed stride from layer 0's
        self.stacked = {}
        for kind, parts in (("qkv", ("q", "k", "v")), ("o", ("o",)), ("gate_up", ("gate", "up")), ("down", ("down",))):
            mats = [[weights[f"blk.{i}.{LAYER_TENSORS[p]}"] for p in parts] for i in range(cfg.n_layers)]
            rows = sum(m.shape[0] for m in mats[0])
            out = torch.empty((cfg.n_layers, rows, mats[0][0].shape[1]), dtype=mats[0][0].dtype, device=mats[0][0].device)
            for i, ms in enumerate(mats):
                torch.cat(ms, out=out[i])
            self.stacked[kind] = out
        for i in range(cfg.n_layers):
            L = {k: weights[f"blk.{i}.{name}"] for k, name in LAYER_TENSORS.items()}
            L["qkv"], L["o"], L["gate_up"], L["down"] = (self.stacked[k][i] for k in ("qkv", "o", "gate_up", "down"))
            L["q"], L["k"], L["v"] = L["qkv"].split([nq, nkv, nkv])  # [nq + 2 nkv, D] as views
            L["gate"], L["up"] = L["gate_up"].split([cfg.ffn, cfg.ffn])
            self.layers.append(L)
        n_pos = cfg.context_length if max_positions is None else min(max_positions, cfg.context_length)
        self.rope = {
            True: rope_tables(cfg.rope_global, cfg.head_dim, n_pos, self.device),
            False: rope_tables(cfg.rope_local, cfg.head_dim, n_pos, self.device),
        }
        self.embed_scale = torch.tensor(math.sqrt(cfg.hidden), dtype=dtype, device=self.device)  # rounded like HF

    # ---- pieces -------------------------------------------------------------------------------
    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [T] -> [T, D] scaled embedding."""
        return self.embed[tokens] * self.embed_scale

    def head_packed(self):
        """head_q8 as one q8_0 PackedWeight [V, D] over the same tensors (no copy), or None without
        them. One object per model: the layouts a GEMV builds from it (quant/kernels/frag8.for_weight8
        keeps them on the object) are then built once, whichever decoders use it."""
        if self.head_q8 is not None and self._head_pw is None:
            from ..quant.repack import PackedWeight

            self._head_pw = PackedWeight("q8_0", tuple(self.head_q8[0].shape), *self.head_q8)
        return self._head_pw

    def lm_head(self, h_normed: torch.Tensor) -> torch.Tensor:
        """[T, D] (after the final norm) -> fp32 logits [T, V]."""
        return F.linear(h_normed, self.embed).float()

    def final_norm(self, h: torch.Tensor) -> torch.Tensor:
        return rms_norm(h, self.out_norm, self.cfg.eps)

    def attention(self, i: int, h: torch.Tensor, pos: torch.Tensor, kv, ctx: AttnContext) -> torch.Tensor:
        """Residual rows h [T, D] at absolute positions pos [T]: writes this layer's K/V at cells
        pos, then attends over ctx's cells. Returns the attention output before the o-projection."""
        d, L = self.cfg.block, self.layers[i]
        q, k, v = project_qkv(L, d, h, ctx.cos, ctx.sin)
        kv.write(i, pos, k, v)
        if ctx.key_pos is None:  # every cell (captured global layers): no gather copy
            K, V = kv.k[i], kv.v[i]  # [S = capacity, Hkv, Dh]
        else:
            K, V = kv.k[i][ctx.key_pos.clamp(min=0)], kv.v[i][ctx.key_pos.clamp(min=0)]  # [S, Hkv, Dh]
        # prefill chunks on CUDA: fused attention; few rows (decode/verify) or CPU: plain math
        return attend(d, q, K, V, ctx.mask, sdpa=h.is_cuda and h.shape[0] > 16)

    def context(self, is_global: bool, pos: torch.Tensor, key_pos: torch.Tensor | None, kv) -> AttnContext:
        """Mask [T, S]: causal, inside the window for sliding layers, padding excluded."""
        cos_t, sin_t = self.rope[is_global]
        kp = (kv.cell_ids if key_pos is None else key_pos)[None, :]
        qp = pos[:, None]
        mask = (kp >= 0) & (kp <= qp)
        if not is_global:
            mask = mask & (qp - kp < self.cfg.sliding_window)
        return AttnContext(cos_t[pos], sin_t[pos], key_pos, mask)

    def key_positions(self, is_global: bool, pos0: int, T: int) -> torch.Tensor:
        """Cells an eager forward of rows [pos0, pos0+T) must read in a global or sliding layer."""
        start = 0 if is_global else max(0, pos0 - self.cfg.sliding_window + 1)
        return torch.arange(start, pos0 + T, device=self.device)

    # ---- whole forward ------------------------------------------------------------------------
    def forward_hidden(self, tokens: torch.Tensor, pos: torch.Tensor, kv, key_pos: dict[bool, torch.Tensor]) -> torch.Tensor:
        """tokens [T], pos [T] absolute positions; key_pos[is_global] -> [S] cells to read (None =
        every cell).
        Returns the last hidden state [T, D] before the final norm."""
        c = self.cfg
        ctx = {g: self.context(g, pos, key_pos[g], kv) for g in (False, True)}
        h = self.embed_tokens(tokens)
        for i in range(c.n_layers):
            h = finish(self.layers[i], c.block, h, self.attention(i, h, pos, kv, ctx[c.is_global(i)]))
        return h

    def forward(self, tokens: torch.Tensor, pos0: int, kv, logits: bool = True) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Eager forward of T rows starting at absolute position pos0 (python int).
        Returns (logits [T, V] fp32, or None without `logits`, hidden [T, D] before the final norm)."""
        T = int(tokens.shape[0])
        assert T >= 1 and pos0 >= 0
        if pos0 + T > kv.capacity:
            raise AssertionError(f"forward past the cache: {pos0}+{T} > {kv.capacity}")
        pos = torch.arange(pos0, pos0 + T, device=self.device)
        key_pos = {g: self.key_positions(g, pos0, T) for g in (False, True)}
        h = self.forward_hidden(tokens, pos, kv, key_pos)
        return (self.lm_head(self.final_norm(h)) if logits else None), h
