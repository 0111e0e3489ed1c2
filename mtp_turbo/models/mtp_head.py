"""The MTP head: its configuration, its file's names, its weight-format policy, its math, and a
from-scratch reference.

Owns: MTPConfig; the head file's names (ARCH, tensor_names) and option values (--draft-quant
formats and which matrices they apply to: `policy_fmt`, LM-head row formats, GEMV backends, the
shipped head's path); the head's own math around one block of the main model's family
(block.py): `x = fc_embedding(norm_e(embed(t+1))) + fc_hidden(norm_h(h_t))`, the block (on Gemma-3
with its sliding layers' RoPE base), final norm, the main model's tied LM head or a gathered subset of its rows; MTPHead (weights, LM
head rows, RoPE tables); the read-cell rule stated plainly (read_set) and the from-scratch
reference drafts the tests compare the drafter with.
Ignores: the drafter's cache and rounds (spec/drafters/mtp.py), loading a head file
(mtp_load.py), writing heads (train/export.py), the cell bookkeeping (cache/cells.py).

Tensor names in the GGUF (llama.cpp's nextn convention where it fits; L = the main model's
n_layer): blk.L.nextn.{enorm,hnorm,fc_embedding,fc_hidden,shared_head_norm}.weight and the block's
blk.L.{attn_norm,attn_q,...}.weight; metadata mtp.base_model_sha256, mtp.hidden_source,
mtp.vocab_ids (absent = full head), mtp.recipe (JSON).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .arch import FAMILIES, BlockSpec, layer_tensors
from .block import attend, finish, linear, project_qkv, rms_norm, rope_tables

ARCH = "gemma3-mtp"
HIDDEN_SOURCES = ("pre_norm", "post_norm")
DATA = Path(__file__).resolve().parent.parent / "data"
DEFAULT_HEAD = DATA / "gemma3-270m-mtp.gguf"  # the default model's
# head-specific tensors: internal name -> GGUF name suffix after "blk.{L}."
NEXTN_TENSORS = {"enorm": "nextn.enorm", "hnorm": "nextn.hnorm", "fc_e": "nextn.fc_embedding",
                 "fc_h": "nextn.fc_hidden", "out_norm": "nextn.shared_head_norm"}
# --draft-quant: the matrices that take the chosen format (DESIGN.md "Low-bit draft weights");
# K/V stay Q8_0, norms stay float, and the LM head rows are the main model's embedding, untouched
DRAFT_QUANTS = ("q8_0", "q5_0", "q4_0", "bf16")
DRAFT_QUANT_KEYS = ("q", "o", "fc_e", "fc_h", "gate", "up", "down")
# --draft-quant name -> quant/formats.py format used for requantization (None = keep stored values)
REQUANT_FMT = {"q8_0": None, "bf16": None, "q5_0": "q5_0", "q4_0": "q4_0_lloyd"}
HEAD_QUANTS = ("main", "bf16", "q8_0", "q5_0", "q4_0")  # LM head rows: the main model's format, or told
GEMV_BACKENDS = ("auto", "dense", "torch", "triton")  # see uses_packed


@dataclass(frozen=True)
class MTPConfig:
    hidden: int = 640
    n_heads: int = 4
    n_kv_heads: int = 1
    head_dim: int = 256
    ffn: int = 2048
    eps: float = 1e-6
    rope_base: float = 10_000.0
    n_layer: int = 18  # the main model's layer count: the head's tensors live at blk.{n_layer}
    hidden_source: str = "pre_norm"  # which main hidden the head reads: before or after the final norm
    family: str = "gemma3"  # the main model's: the block's norms and activation, the embedding's scale

    def __post_init__(self) -> None:
        assert self.hidden_source in HIDDEN_SOURCES, self.hidden_source
        assert self.n_heads % self.n_kv_heads == 0
        assert self.family in FAMILIES, self.family

    @property
    def query_scale(self) -> float:
        return self.head_dim ** -0.5

    @property
    def block(self) -> BlockSpec:
        """A block of the main model's family (its norms, q/k norms, activation), without QKV biases."""
        t = FAMILIES[self.family]
        return BlockSpec(self.hidden, self.n_heads, self.n_kv_heads, self.head_dim, self.ffn, self.eps,
                         self.query_scale, sandwich_norms=t.sandwich_norms, activation=t.activation,
                         qk_norm=t.qk_norm, qkv_bias=False)

    @property
    def embed_scale(self) -> float:
        """The main model's embedding scale (the head embeds token t+1 as the main model does)."""
        return math.sqrt(self.hidden) if FAMILIES[self.family].scaled_embedding else 1.0

    @classmethod
    def for_main(cls, mc, hidden_source: str = "pre_norm") -> "MTPConfig":
        # RoPE: Gemma-3's sliding layers' base (the head reads a window of cells, as they do); else the model's
        base = mc.rope_local.base if mc.rope_local.base > 1 else mc.rope_global.base
        return cls(hidden=mc.hidden, n_heads=mc.n_heads, n_kv_heads=mc.n_kv_heads, head_dim=mc.head_dim,
                   ffn=mc.ffn, eps=mc.eps, rope_base=base, n_layer=mc.n_layers, hidden_source=hidden_source,
                   family=mc.family)


def shipped_head(main_path, family: str) -> Path | None:
    """The head shipped for the model file at `main_path` (the registry's mtp_head for that file);
    for any other Gemma-3 file the default model's (its base-model hash then refuses it, naming
    why), else None."""
    from ..io.registry import entry_of_file

    e = entry_of_file(main_path)
    if e is not None and e.mtp_head:
        return DATA / e.mtp_head
    return DEFAULT_HEAD if family == "gemma3" else None


def tensor_names(cfg: MTPConfig) -> dict[str, str]:
    """internal weight name -> GGUF tensor name."""
    L = cfg.n_layer
    names = {k: f"blk.{L}.{v}.weight" for k, v in NEXTN_TENSORS.items()}
    names.update({k: f"blk.{L}.{v}" for k, v in layer_tensors(cfg.block).items()})
    return names


def policy_fmt(draft_quant: str, key: str) -> tuple[str, str] | None:
    """(packed format, quantizer name) of head matrix `key` under --draft-quant (None = dense):
    the DRAFT_QUANT_KEYS matrices take the chosen format, K/V stay Q8_0; bf16 keeps all dense.
    Norms are never packed (callers skip them)."""
    if draft_quant == "bf16":
        return None
    if key not in DRAFT_QUANT_KEYS:
        return "q8_0", "q8_0"  # K/V
    return draft_quant, REQUANT_FMT[draft_quant] or draft_quant


# ---- the math, shared by the drafter, the reference and training ------------------------------
# W maps names to dense [out, in] tensors (training, the reference) or, for the drafter on the
# packed path, to PackedLinear layers; "qkv" / "gate_up" (fused rows) replace q, k, v / gate, up.
def input_rows(W: dict, cfg: MTPConfig, e: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """e: scaled embedding of token t+1 [.., D]; h: the state for position t [.., D] -> x [.., D].
    With W["fc"] (= [fc_embedding | fc_hidden], the drafter's) one product over both normed inputs."""
    en, hn = rms_norm(e, W["enorm"], cfg.eps), rms_norm(h, W["hnorm"], cfg.eps)
    if "fc" in W:
        return linear(W["fc"], torch.cat([en, hn], dim=-1))
    return linear(W["fc_e"], en) + linear(W["fc_h"], hn)


class MTPHead:
    """Weights of the head plus its LM head rows. `head_rows` [N, D] are main embedding rows (all
    of them, or the gathered `vocab_ids`); argmax ids are mapped back through vocab_ids.
    W: the dense values (the reference, training, tests). ops: what the cached drafter computes
    with: W itself, or (packed path, see pack_ops) norms plus PackedLinear layers, with the LM head
    as ops["head"]. Both hold the same values, so they agree to fp32 rounding."""

    def __init__(self, cfg: MTPConfig, weights: dict[str, torch.Tensor], embed: torch.Tensor,
                 vocab_ids: torch.Tensor | None, device, dtype, ops: dict | None = None,
                 head_rows: torch.Tensor | None = None):
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        self.W = weights
        self.ops = weights if ops is None else ops
        self.embed = embed  # main embedding [V, D] (unscaled: the tied LM head), or its rows (EmbeddingRows)
        self.embed_scale = torch.tensor(cfg.embed_scale, dtype=dtype).to(self.device)
        self.vocab_ids = None if vocab_ids is None else vocab_ids.to(self.device, torch.int64)
        self.n_rows = int(embed.shape[0] if vocab_ids is None else vocab_ids.shape[0])  # the head's rows
        self._head_rows = head_rows  # made on first use where not given (see head_rows)
        self.rope = None  # (cos, sin) tables, grown on demand

    @property
    def head_rows(self) -> torch.Tensor:
        """[N, D] values of the LM head (the dense path and the reference): given, or the embedding's
        rows gathered on first use (a drafter computing with ops["head"] never asks: ~0.05 s of a
        one-shot CPU start)."""
        if self._head_rows is None:
            e = self.embed
            if self.vocab_ids is not None:
                self._head_rows = e[self.vocab_ids].contiguous()
            else:  # every row: the dense table
                self._head_rows = e if isinstance(e, torch.Tensor) else e.dense()
        return self._head_rows

    def rope_at(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        need = int(pos.max().item()) + 1
        if self.rope is None or self.rope[0].shape[0] < need:
            n = max(need, 4096 if self.rope is None else 2 * self.rope[0].shape[0])
            self.rope = rope_tables(self.cfg.rope_base, self.cfg.head_dim, n, self.device)
        return self.rope[0][pos], self.rope[1][pos]

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed[tokens] * self.embed_scale

    def step(self, x: torch.Tensor, q: torch.Tensor, K: torch.Tensor, V: torch.Tensor,
             mask: torch.Tensor | None = None, dense: bool = False) -> torch.Tensor:
        """The block's output state [T, D] (the chained `h`) from its input x [T, D], the query
        q [T, H, Dh] and the cells it reads K/V [S, Hkv, Dh] (mask [T, S], None = all).
        dense: with the dense values W (the reference) rather than the drafter's ops."""
        d = self.cfg.block
        return finish(self.W if dense else self.ops, d, x, attend(d, q, K, V, mask))

    def input_rows(self, e: torch.Tensor, h: torch.Tensor, dense: bool = False) -> torch.Tensor:
        return input_rows(self.W if dense else self.ops, self.cfg, e, h)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, dense: bool = False):
        """Block input x [T, D] with its rows' RoPE cos/sin [T, Dh] -> q [T, H, Dh], k, v [T, Hkv, Dh]."""
        return project_qkv(self.W if dense else self.ops, self.cfg.block, x, cos, sin)

    def logits(self, h: torch.Tensor, dense: bool = False) -> torch.Tensor:
        """Block output state [T, D] -> fp32 logits over the head's rows [T, N] (dense: with
        head_rows even when ops has a packed head, as the reference does)."""
        hn = rms_norm(h, self.W["out_norm"], self.cfg.eps)
        op = None if dense else self.ops.get("head")
        return F.linear(hn, self.head_rows).float() if op is None else op(hn, out_dtype=torch.float32)

    def argmax_ids(self, h: torch.Tensor) -> torch.Tensor:
        """[T, D] -> token ids [T] (int64) of the head's argmax."""
        i = self.logits(h).argmax(-1)
        return i if self.vocab_ids is None else self.vocab_ids[i]


def read_set(p: int, committed_hi: int, chain: list[int], sink: int, window: int) -> list[int]:
    """The rule DraftCells implements, stated plainly for the reference: committed cells
    [0, committed_hi) that are < sink or in [p - window, p], plus chain cells in [p - window, p]."""
    lo = p - window
    com = [c for c in range(min(committed_hi, p + 1)) if c < sink or c >= lo]
    return com + [c for c in chain if lo <= c <= p]


def reference_drafts(head: MTPHead, tokens: list[int], hidden: torch.Tensor, k: int, sink: int, window: int,
                     forced: list[int] | None = None):
    """From-scratch drafts for the committed `tokens` (T of them): hidden [T-1, D] = the main
    model's states (already in the head's hidden_source) of positions 0..T-2. Every committed cell
    c <= p0 = T-2 is recomputed from (h_c, token c+1); the chain is run with full recomputation.
    forced: chain input tokens to use instead of the drafts (teacher forcing, as training does).
    Returns (draft ids, fp32 logits [k, N])."""
    T = len(tokens)
    p0 = T - 2
    assert p0 >= 0 and hidden.shape[0] >= p0 + 1
    dev = head.device
    e = head.embed_tokens(torch.tensor(tokens[1: p0 + 2], device=dev))
    x = head.input_rows(e, hidden[: p0 + 1].to(dev, head.dtype), dense=True)
    _, Kc, Vc = head.qkv(x, *head.rope_at(torch.arange(p0 + 1, device=dev)), dense=True)
    K, V = [Kc[i] for i in range(p0 + 1)], [Vc[i] for i in range(p0 + 1)]
    drafts, logits = [], []
    state_x, chain = x[p0: p0 + 1], []
    for j in range(k):
        p = p0 + j
        q, kk, vv = head.qkv(state_x, *head.rope_at(torch.tensor([p], device=dev)), dense=True)
        if j > 0:  # chain cell: its K/V exist only in this chain
            K.append(kk[0])
            V.append(vv[0])
            chain.append(p)
        cells = read_set(p, p0 + 1, chain, sink, window)
        idx = [c if c <= p0 else p0 + 1 + chain.index(c) for c in cells]
        h = head.step(state_x, q, torch.stack([K[i] for i in idx]), torch.stack([V[i] for i in idx]), dense=True)
        lg = head.logits(h, dense=True)
        d = int(lg.argmax(-1).item())
        d = d if head.vocab_ids is None else int(head.vocab_ids[d].item())
        drafts.append(d)
        logits.append(lg[0])
        nxt = d if forced is None or j >= len(forced) else forced[j]
        state_x = head.input_rows(head.embed_tokens(torch.tensor([nxt], device=dev)), h, dense=True)
    return drafts, torch.stack(logits) if logits else torch.zeros(0)
