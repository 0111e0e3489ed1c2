"""The main model: weights and one eager forward for any rows, for every family (arch.py).

Owns: the decoder around its blocks (the embedding and its scale, global and sliding layers with
their RoPE tables, the final norm and the LM head: the embedding when tied, the file's output
matrix otherwise), the attention context of a forward (RoPE rows, cells to read, mask) and the
eager forward of T rows. The block's math is block.py's, the family's description arch.py's.
Ignores: cache bookkeeping (cache/kv.py owns lengths, rollback, sessions), sampling, speculation,
the fused few-row kernels (fused.py), reading the file (load.py).

One forward takes T new rows at absolute positions `pos[T]` (a prefill chunk, a 1-row decode, a
k+1-row verify) and writes their K/V into the static cache at cell = position. Attention reads the
cells named by a `key_pos` vector, so the same code serves the eager prefill path (python bounds)
and the captured decode/verify path (static shapes, positions live on the device).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..quant.planes import weight_tensors
from .arch import ModelConfig, layer_tensors
from .block import attend, finish, linear, project_qkv, rms_norm, rope_tables


ROW_ATTENTION_ROWS = 16  # CPU forwards of up to this many rows attend row by row (Decoder.context)


@dataclass
class AttnContext:
    """What every layer of one attention type reads in a forward, built once per forward:
    RoPE rows of the query positions, the cells to read, and the mask over them."""

    cos: torch.Tensor  # [T, Dh]
    sin: torch.Tensor  # [T, Dh]
    key_pos: torch.Tensor | slice | None  # [S] cells to read (< 0 = padding), a range of cells, or None: all
    mask: torch.Tensor | None  # [T, S] bool, True = attend; None: every cell read is attended
    # each row's own cells (a range, or a draft tree's index list), attended row by row (a CPU
    # verify: see Decoder.context)
    rows: tuple[slice | torch.Tensor, ...] | None = None
    cells: torch.Tensor | None = None  # [T] where the rows' K/V go (None: cell = position)


class EmbeddingRows:
    """A CPU model's embedding held as the file's bytes, read like its dense table [V, D] where a
    drafter reads rows (`rows[ids]`: ids of any shape -> [*ids.shape, D], the dense table's values)."""

    def __init__(self, model: "Decoder"):
        self.model = model
        self.shape = (model.cfg.vocab_size, model.cfg.hidden)
        self.device, self.dtype = model.device, model.dtype

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model.embedding_rows(ids.reshape(-1)).reshape(*ids.shape, self.shape[1])

    def dense(self) -> torch.Tensor:
        return self.model.embed


class Decoder:
    """Weights plus the forward. `weights` maps GGUF tensor names to dense tensors: linear weights
    [out, in] in `dtype`, norms and biases fp32. q/k/v and gate/up are stored fused (one matrix
    read per row group) with the parts as views."""

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor], device, dtype,
                 head_q8: tuple[torch.Tensor, torch.Tensor] | None = None, max_positions: int | None = None,
                 head_file=None, embed_file=None):
        """head_q8: the LM head's Q8_0 codes int8 [V, D] and scales fp16 [V, D / 32] as in the file
        (the embedding's when tied, else output.weight's): the fused step's LM head reads them
        (fused.py), the MTP drafter takes its head rows from them (mtp_load.py); the dense head is
        their dequantization. max_positions: positions the RoPE tables cover (default the model's
        context length; an engine passes its cache's, so a 4096-cell engine does not build 32768-row
        tables). head_file: the LM head as the file's bytes (quant/planes.FusedWeight) for the fused
        step, where the loader keeps them (load.py); weights then hold the layers' matrices the same
        way ('blk.{i}.qkv', '.gate_up', '.o', '.down') and an untied head only there. embed_file: the
        embedding as the file's bytes (quant/planes.PlaneMatrix) instead of weights' dense table: rows
        are dequantized as a forward gathers them (embedding_rows)."""
        self.cfg = cfg
        self.head_file = head_file
        self.embed_file = embed_file
        self.device = torch.device(device)
        self.dtype = dtype
        self._embed = weights.get("token_embd.weight")  # [V, D]; None with embed_file (see embed)
        assert (self._embed is None) != (embed_file is None), "the embedding is dense or the file's bytes"
        # [V, D]; None where the caller holds the head otherwise (a CPU int8 cache: load.py)
        tied = self._embed if self._embed is not None else head_file
        self.head_weight = tied if cfg.tied_head else weights.get("output.weight", head_file)
        if head_q8 is not None:
            assert head_q8[0].shape == self.head_weight.shape and head_q8[0].dtype == torch.int8, head_q8[0].shape
            assert head_q8[1].shape == (self.head_weight.shape[0], self.head_weight.shape[1] // 32), head_q8[1].shape
        self.head_q8 = head_q8
        self.head_op = None  # the LM head's own op where the matrix is held otherwise (quant/cpu_linear.py)
        self._head_pw = None  # head_q8 as a PackedWeight, made on first use (head_packed)
        self.out_norm = weights["output_norm.weight"]
        self.layers = []
        nq, nkv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        names = layer_tensors(cfg)
        for i in range(cfg.n_layers):
            # (the matrices are absent where the caller sets their ops after: a CPU int8 cache)
            L = {k: weights[f"blk.{i}.{name}"] for k, name in names.items() if f"blk.{i}.{name}" in weights}
            for k in ("qkv", "gate_up", "o", "down"):  # the file's bytes (load.load_file_matrices)
                if f"blk.{i}.{k}" in weights:
                    L[k] = weights[f"blk.{i}.{k}"]
            if "q" in L:  # fused rows: one GEMV reads q|k|v (and adds their biases), one reads gate|up
                L["qkv"] = torch.cat([L.pop("q"), L.pop("k"), L.pop("v")])
                L["gate_up"] = torch.cat([L.pop("gate"), L.pop("up")])
                L["q"], L["k"], L["v"] = L["qkv"].split([nq, nkv, nkv])  # [nq + 2 nkv, D] as views
                L["gate"], L["up"] = L["gate_up"].split([cfg.ffn, cfg.ffn])
            if cfg.qkv_bias:
                L["qkv_bias"] = torch.cat([L.pop("q_bias"), L.pop("k_bias"), L.pop("v_bias")]).float()
                L["q_bias"], L["k_bias"], L["v_bias"] = L["qkv_bias"].split([nq, nkv, nkv])
            self.layers.append(L)
        n_pos = cfg.context_length if max_positions is None else min(max_positions, cfg.context_length)
        g = cfg.rope_global
        self.rope = {True: rope_tables(g.base, cfg.head_dim, n_pos, self.device, g.linear_factor,
                                       weights.get("rope_freqs.weight"))}
        loc = cfg.rope_local
        self.rope[False] = rope_tables(loc.base, cfg.head_dim, n_pos, self.device, loc.linear_factor) \
            if cfg.has_sliding else self.rope[True]
        self.embed_scale = torch.tensor(cfg.embed_scale, dtype=dtype, device=self.device)  # rounded like HF

    # ---- pieces -------------------------------------------------------------------------------
    @property
    def embed(self) -> torch.Tensor:
        """The dense embedding [V, D] in the activation dtype. Held as the file's bytes (embed_file),
        it is dequantized whole on first use and kept (what reads the whole table: an MTP head's
        rows, training); a forward's rows come from embedding_rows without it."""
        if self._embed is None:
            self._embed = self.embed_file.dequantize().to(self.dtype)
        return self._embed

    @property
    def dense_embed(self) -> bool:
        """True when the dense embedding table is held (made or loaded), False while only the file's bytes are."""
        return self._embed is not None

    def embedding_rows(self, tokens: torch.Tensor) -> torch.Tensor:
        """[T, D] unscaled embedding rows of tokens [T] in the activation dtype: the dense table's rows,
        or the same values dequantized from the file's bytes (no host sync: capturable)."""
        if self._embed is not None:
            return self._embed[tokens]
        return self.embed_file.row_values(tokens).to(self.dtype)

    def embedding_table(self):
        """What a drafter indexes for embedding rows ([ids] -> rows, .shape): the dense table where
        the model holds one (or off the CPU: the GPU kernels read it whole), else EmbeddingRows,
        which gathers rows from the file's bytes without making the table."""
        return self.embed if self.dense_embed or self.device.type != "cpu" else EmbeddingRows(self)

    def embed_tensors(self, one_row: bool = False) -> list[torch.Tensor]:
        """The tensors holding the embedding (one_row: one row of each), as the model holds it now."""
        held = [self._embed] if self._embed is not None else weight_tensors(self.embed_file)
        return [t[0] for t in held] if one_row else held

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [T] -> [T, D] scaled embedding."""
        return self.embedding_rows(tokens) * self.embed_scale

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
        if self.head_op is not None:
            return self.head_op(h_normed, out_dtype=torch.float32)
        return linear(self.head_weight, h_normed).float()

    def final_norm(self, h: torch.Tensor) -> torch.Tensor:
        return rms_norm(h, self.out_norm, self.cfg.eps)

    def attention(self, i: int, h: torch.Tensor, pos: torch.Tensor, kv, ctx: AttnContext) -> torch.Tensor:
        """Residual rows h [T, D] at absolute positions pos [T]: writes this layer's K/V at cells
        pos, then attends over ctx's cells. Returns the attention output before the o-projection."""
        d, L = self.cfg.block, self.layers[i]
        q, k, v = project_qkv(L, d, h, ctx.cos, ctx.sin)
        kv.write(i, pos if ctx.cells is None else ctx.cells, k, v)
        if ctx.rows is not None:  # row by row, as one-row steps attend (see context)
            return torch.cat([attend(d, q[j:j + 1], kv.k[i][r], kv.v[i][r], None, sdpa=True)
                              for j, r in enumerate(ctx.rows)])
        if ctx.key_pos is None:  # every cell (captured global layers): no gather copy
            K, V = kv.k[i], kv.v[i]  # [S = capacity, Hkv, Dh]
        elif isinstance(ctx.key_pos, slice):  # a range of cells (eager forwards): views, no copy
            K, V = kv.k[i][ctx.key_pos], kv.v[i][ctx.key_pos]
        else:
            K, V = kv.k[i][ctx.key_pos.clamp(min=0)], kv.v[i][ctx.key_pos.clamp(min=0)]  # [S, Hkv, Dh]
        # torch's fused attention for prefill chunks on CUDA and every forward on the CPU (one op, not
        # ~20 a layer); few rows on CUDA (the torch step, captured): plain math
        return attend(d, q, K, V, ctx.mask, sdpa=not h.is_cuda or h.shape[0] > 16)

    def context(self, is_global: bool, pos: torch.Tensor, key_pos: torch.Tensor | slice | None, kv) -> AttnContext:
        """Mask [T, S]: causal, inside the window for sliding layers, padding excluded (None where a
        single row reads a range of cells that are all attended: the eager one-row step)."""
        cos_t, sin_t = self.rope[is_global]
        T = pos.shape[0]
        if isinstance(key_pos, slice) and T == 1:  # key_positions made the range exactly so
            return AttnContext(cos_t[pos], sin_t[pos], key_pos, None)
        if isinstance(key_pos, slice) and T <= ROW_ATTENTION_ROWS and self.device.type == "cpu":
            # a verify's rows one by one, each over the cells a one-row step at its position reads:
            # torch's fused CPU attention takes another path for several rows under a mask, whose
            # rounding would make speculative text part from plain text (same seed)
            p0 = key_pos.stop - T
            rows = tuple(self.key_positions(is_global, p0 + j, 1) for j in range(T))
            return AttnContext(cos_t[pos], sin_t[pos], key_pos, None, rows)
        kp = kv.cell_ids if key_pos is None else kv.cell_ids[key_pos] if isinstance(key_pos, slice) else key_pos
        kp, qp = kp[None, :], pos[:, None]
        mask = (kp >= 0) & (kp <= qp)
        if not is_global:  # only where the model has sliding layers
            mask = mask & (qp - kp < self.cfg.sliding_window)
        return AttnContext(cos_t[pos], sin_t[pos], key_pos, mask)

    def key_positions(self, is_global: bool, pos0: int, T: int) -> slice:
        """Cells an eager forward of rows [pos0, pos0+T) must read in a global or sliding layer: from
        the first row's window (or cell 0) to the last row."""
        start = 0 if is_global else max(0, pos0 - self.cfg.sliding_window + 1)
        return slice(start, pos0 + T)

    @property
    def layer_kinds(self) -> tuple[bool, ...]:
        """The attention kinds the layers use: (True,) global only, or (False, True) with sliding layers."""
        return (False, True) if self.cfg.has_sliding else (True,)

    def tree_context(self, is_global: bool, shape, p0: int, by_row: bool | None = None) -> AttnContext:
        """A draft tree's rows (spec/tree.TreeShape; node n at position p0 + its depth, its K/V in
        cell p0 + n): each row reads the cells a one-row step at its position reads, with its
        ancestors' cells in place of the positions past p0 (the same keys in the same order). On
        the CPU row by row, as a chain's verify (context); elsewhere (or by_row False) one masked attention."""
        cos_t, sin_t = self.rope[is_global]
        dev = self.device
        depths = torch.tensor(shape.depths, device=dev)
        pos = p0 + depths
        keys = []
        for n, anc in enumerate(shape.ancestors):
            committed = self.key_positions(is_global, p0 + shape.depths[n], 1)
            path = [p0 + m for m in anc if m >= 0 and p0 + shape.depths[m] >= committed.start]
            keys.append(torch.cat([torch.arange(committed.start, p0, device=dev), torch.tensor(path, device=dev)]))
        cells = p0 + torch.arange(shape.nodes, device=dev)
        if dev.type == "cpu" if by_row is None else by_row:
            return AttnContext(cos_t[pos], sin_t[pos], None, None, tuple(keys), cells)
        start = min(int(k[0]) for k in keys)
        key_pos = torch.arange(start, p0 + shape.nodes, device=dev)
        mask = torch.zeros(shape.nodes, key_pos.shape[0], dtype=torch.bool, device=dev)
        for n, k in enumerate(keys):
            mask[n, k - start] = True
        return AttnContext(cos_t[pos], sin_t[pos], key_pos, mask, None, cells)

    # ---- whole forward ------------------------------------------------------------------------
    def forward_tree(self, tokens: torch.Tensor, shape, p0: int, kv,
                     by_row: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Eager forward of a draft tree's rows (tokens [N], node 0 the pending token at position p0),
        their K/V written to cells p0 .. p0 + N - 1; the accepted path's are moved to their positions
        by kv.move_cells. Returns (logits [N, V] fp32, hidden [N, D]): row n's values are a one-row
        step's after the path to n."""
        if p0 + shape.nodes > kv.capacity:
            raise AssertionError(f"tree past the cache: {p0}+{shape.nodes} > {kv.capacity}")
        pos = p0 + torch.tensor(shape.depths, device=self.device)
        ctx = {g: self.tree_context(g, shape, p0, by_row) for g in self.layer_kinds}
        h = self._layers(tokens, pos, kv, ctx)
        return self.lm_head(self.final_norm(h)), h

    def forward_hidden(self, tokens: torch.Tensor, pos: torch.Tensor, kv, key_pos: dict[bool, torch.Tensor]) -> torch.Tensor:
        """tokens [T], pos [T] absolute positions; key_pos[is_global] -> [S] cells to read (None =
        every cell).
        Returns the last hidden state [T, D] before the final norm."""
        ctx = {g: self.context(g, pos, key_pos[g], kv) for g in self.layer_kinds}
        return self._layers(tokens, pos, kv, ctx)

    def _layers(self, tokens: torch.Tensor, pos: torch.Tensor, kv, ctx: dict[bool, AttnContext]) -> torch.Tensor:
        c = self.cfg
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
        key_pos = {g: self.key_positions(g, pos0, T) for g in self.layer_kinds}
        h = self.forward_hidden(tokens, pos, kv, key_pos)
        return (self.lm_head(self.final_norm(h)) if logits else None), h
