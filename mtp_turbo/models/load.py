"""Build a main model from a GGUF file onto a device.

Owns: choosing the dtype per device, checking the file against its architecture description
(arch.ModelConfig.from_gguf: names, shapes, types) before anything is allocated, dequantizing every
tensor onto the device with a progress bar, refusing weights that hold NaN or infinities (one sum
per tensor, read while the tensor is fresh: ~15-25 ms of a 2-4 s CPU load of the default model),
undoing llama.cpp's q/k row interleave for the llama family, and keeping the LM head's Q8_0 bytes
where the fused step reads them. Ignores: the forward itself (decoder.py).
"""

from __future__ import annotations

import torch
from tqdm import tqdm

from ..errors import ModelFileError
from ..io.gguf_file import GGUFFile, ggml_type_name
from ..quant.dequant import INT4_TYPES, SUPPORTED_TYPES, dequantize
from ..quant.frag_matrix import frag_matrix, frag_runs
from ..quant.planes import FusedWeight, PlaneMatrix, fused_weight, plane_format
from ..quant.repack import split_q8_0
from .arch import ModelConfig, layer_tensors, tensor_shapes
from .decoder import Decoder

Q8_0 = 8


def default_dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def model_config(gf: GGUFFile) -> ModelConfig:
    """The file's architecture description, checked against its tensors and tokenizer."""
    cfg = ModelConfig.from_gguf(gf.metadata, gf.tensors)
    tok = gf.metadata.get("tokenizer.ggml.tokens")  # a list of strings when present (the reader checks)
    if tok is not None and len(tok) != cfg.vocab_size:
        raise ModelFileError(f"the tokenizer has {len(tok)} tokens but the embedding {cfg.vocab_size} rows")
    for name in tensor_shapes(cfg):
        t = gf.tensors[name]
        if t.ggml_type not in SUPPORTED_TYPES:
            names = ", ".join(sorted(ggml_type_name(k) for k in SUPPORTED_TYPES))
            raise ModelFileError(f"tensor {name} has unsupported type {ggml_type_name(t.ggml_type)} (supported: {names})")
    return cfg


def check_finite(gf: GGUFFile, names: list[str], sums: list[torch.Tensor]) -> None:
    """Refuse weights holding NaN or infinities (a damaged file, or a bad conversion): the model
    would run and print garbage. A tensor's sum is finite iff all of its values are (short of
    values near the float32 limit, which are no weights either); quantized types can only hold
    them in their block scales, but the dequantized sum covers every type at one read."""
    if not sums:
        return
    finite = torch.isfinite(torch.stack(sums)).cpu()
    if not bool(finite.all()):
        bad = names[int((~finite).nonzero()[0])]
        raise ModelFileError(f"{gf.path}: tensor {bad} holds NaN or infinite values (the file is damaged)")


def deinterleave_heads(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Rows of a q / k weight (or bias) as transformers orders them from llama.cpp's llama order:
    llama.cpp's converter stores each head's rows pairwise ([i, 2] for its pairwise RoPE), rotate-half
    RoPE wants them as halves ([2, i])."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape).contiguous()


FUSED_ROWS = {"qkv": ("q", "k", "v"), "gate_up": ("gate", "up"), "o": ("o",), "down": ("down",)}


def raw_rows(gf: GGUFFile, cfg: ModelConfig, name: str, part: str, device) -> torch.Tensor:
    """A matrix's bytes (1-D) with its rows in the Decoder's order (a row's blocks move with it)."""
    raw = gf.raw_tensor(name, device)
    if cfg.traits.qk_interleaved and part in ("q", "k"):
        raw = deinterleave_heads(raw.reshape(gf.tensors[name].shape[0], -1), cfg.n_heads if part == "q" else cfg.n_kv_heads)
    return raw.reshape(-1)


# Why a share: 4-bit matrices pay where they hold most of a step's bytes (Qwen2.5-Coder-1.5B Q4_K_M:
# ~80%, plain 1.5x); Gemma-3-270M's file has ~24% of them, which gave no speed and 4-8 points less MTP
# acceptance on their texts (bench/RESULTS.md session 30)
INT4_MIN_SHARE = 0.5


def int4_matrices(gf: GGUFFile, cfg: ModelConfig) -> dict[str, tuple[list[str], tuple[str, ...]]]:
    """The layer matrices every part of which the file holds in a 4-bit block format (INT4_TYPES),
    by quantize_cpu_model's names -> (the parts' tensor names, their layer_tensors keys); none
    unless they hold at least INT4_MIN_SHARE of the layers' weights. Reads the header only."""
    keys, out = layer_tensors(cfg), {}
    total = four = 0
    for i in range(cfg.n_layers):
        for fused, parts in FUSED_ROWS.items():
            names = [f"blk.{i}.{keys[k]}" for k in parts]
            size = sum(gf.tensors[n].shape[0] * gf.tensors[n].shape[1] for n in names)
            total += size
            if all(gf.tensors[n].ggml_type in INT4_TYPES for n in names):
                four += size
                out[f"blk.{i}.{fused}"] = names, parts
    return out if four >= INT4_MIN_SHARE * total else {}


def int4_blocks(gf: GGUFFile, cfg: ModelConfig) -> dict:
    """int4_matrices' matrices as [(bytes, ggml type, shape)] a part, for Int4Linear."""
    return {m: [(raw_rows(gf, cfg, n, k, "cpu"), gf.tensors[n].ggml_type, tuple(gf.tensors[n].shape))
                for n, k in zip(names, parts)] for m, (names, parts) in int4_matrices(gf, cfg).items()}


def load_file_matrices(gf: GGUFFile, cfg: ModelConfig, device: torch.device, dtype: torch.dtype, names: list[str],
                       sums: list, progress: bool, frag: bool = False) -> dict:
    """Every layer's matrices as the fused GEMVs read them from the file's own bytes:
    'blk.{i}.qkv', '.gate_up', '.o', '.down' -> a FragMatrix (frag: the integer tensor cores'
    layouts, quant/frag_matrix.py) where every part's format has one, else a FusedWeight
    (quant/planes.py). Each tensor's loader values are summed for check_finite (appended to sums,
    its name to names) and dropped."""
    keys = layer_tensors(cfg)
    out = {}
    for i in tqdm(range(cfg.n_layers), desc="loading matrices", unit="layer", disable=not progress, leave=False):
        for fused, parts in FUSED_ROWS.items():
            raws = []
            for k in parts:
                name = f"blk.{i}.{keys[k]}"
                t = gf.tensors[name]
                raw = raw_rows(gf, cfg, name, k, device)
                raws.append((raw, t.ggml_type, tuple(t.shape)))
                names.append(name)
                sums.append(dequantize(raw, t.ggml_type, t.shape).sum(dtype=torch.float32))
            fm = frag_matrix(raws) if frag else None
            out[f"blk.{i}.{fused}"] = fm if fm is not None else fused_weight(raws, dtype)
    return out


def load_model(gf: GGUFFile, device: torch.device, dtype: torch.dtype | None = None, progress: bool = True,
               max_positions: int | None = None, cpu_int8: bool = False, cpu_cache: bool = False,
               file_weights: bool = False, cpu_int4: bool = False, frag: bool | None = None) -> Decoder:
    """The model of `gf` on `device`; max_positions: see Decoder (the engine's context size);
    cpu_int8: on the CPU, the matrices and the LM head held as int8 (quant/cpu_linear.py); with
    cpu_int4 too, the matrices the file holds in 4-bit blocks held as those codes (Int4Linear);
    cpu_cache: those int8 matrices mapped from the user's cache when a run made them before, else
    saved there for the next (quant/cpu_cache.py); file_weights (for the fused step: the engine asks
    on CUDA, the tests in the CPU interpreter): the layers' matrices, and the embedding and LM head
    unless they are Q8_0, held as the file's own bytes with no dense copy (the torch forward
    dequantizes what it reads as it goes): as the integer tensor cores' layouts (frag; None: where
    the frag8 GEMV runs, Hopper) for the formats that have one, else as planes (quant/planes.py)."""
    try:
        cfg = model_config(gf)
    except ModelFileError as e:
        raise ModelFileError(f"{gf.path}: {e}") from None
    device = torch.device(device)
    dtype = dtype or default_dtype(device)
    head_name = "token_embd.weight" if cfg.tied_head else "output.weight"
    int8 = cpu_int8 and device.type == "cpu"
    cached, cache_at, skip = None, None, set()
    if int8 and cpu_cache:
        from ..quant import cpu_cache as cc
        from ..quant.cpu_linear import cpu_op_shapes

        # the key names what the cache holds: a file under the share keeps int8 ops, whatever was asked
        cache_at = cc.cache_file(gf.path, "int4" if cpu_int4 and int4_matrices(gf, cfg) else "int8")
        cached = cc.load(cache_at, cpu_op_shapes(cfg))
        if cached is not None:  # their dense matrices are never read: not loaded at all
            mats = [n for k, n in layer_tensors(cfg).items() if k in ("q", "k", "v", "o", "gate", "up", "down")]
            skip = {f"blk.{i}.{n}" for i in range(cfg.n_layers) for n in mats}
            if not cfg.tied_head:
                skip.add("output.weight")
    weights = {}
    head_q8 = head_file = embed_file = None
    names = list(tensor_shapes(cfg))
    sums = []  # one per tensor, on the device: read once at the end (one sync, not one per tensor)
    checked = []
    if file_weights:
        frag = frag_runs(device) if frag is None else frag
        weights.update(load_file_matrices(gf, cfg, device, dtype, checked, sums, progress, frag))
        skip |= set(checked)
        # the embedding (and the tied head) and an untied head; a Q8_0 head without the layouts keeps the
        # frag8 head's own path (its codes beside a dense table); with them it is a FragMatrix like the rest
        for name in dict.fromkeys(["token_embd.weight", head_name]):
            t = gf.tensors[name]
            if (t.ggml_type == Q8_0 and not frag) or not plane_format(t.ggml_type):
                continue
            raw = gf.raw_tensor(name, device)
            fm = frag_matrix([(raw, t.ggml_type, tuple(t.shape))]) if frag and name == head_name else None
            # a tied K-quant head's layout gives the embedding rows too: one copy of the table's bytes
            one = fm is not None and name == "token_embd.weight" and hasattr(fm.runs[0].layout, "row_values")
            pm = None if one else PlaneMatrix.from_gguf(raw, t.ggml_type, tuple(t.shape))
            if name == "token_embd.weight":
                embed_file = fm if one else pm
            if name == head_name:
                head_file = fm if fm is not None else FusedWeight(pm)
            skip.add(name)
            checked.append(name)
            sums.append(dequantize(raw, t.ggml_type, t.shape).sum(dtype=torch.float32))
    elif int8 and cfg.tied_head and plane_format(gf.tensors["token_embd.weight"].ggml_type):
        # the CPU's embedding rows are gathered from the file's bytes (the same values as the dense
        # table's): no 0.3 s dequantization of the whole table at each start and ~4x less memory
        # (Gemma-3-270M: 178 MB of Q8_0 against 671 MB of float32); its head is the int8 op
        t = gf.tensors["token_embd.weight"]
        embed_file = PlaneMatrix.from_gguf(gf.raw_tensor("token_embd.weight"), t.ggml_type, tuple(t.shape))
        skip.add("token_embd.weight")
        checked.append("token_embd.weight")
        sums.append(embed_file.finite_sum())
    for name in tqdm(names, desc="loading weights", unit="tensor", disable=not progress, leave=False):
        t = gf.tensors[name]
        if name in skip:  # held by the cached ops, or as the file's bytes
            continue
        if name == head_name and t.ggml_type == Q8_0 and device.type == "cuda":
            # the file's codes and scales stay on the device: the fused step's LM head reads them
            # (fused.py) and the MTP drafter gathers its head rows from them; the dense rows serve
            # the embedding (tied) and the torch step
            raw = gf.raw_tensor(name, device)
            head_q8 = split_q8_0(raw, t.shape)
            weights[name] = dequantize(raw, t.ggml_type, t.shape).to(dtype)
            sums.append(weights[name].sum(dtype=torch.float32))
            continue
        # norms, biases and RoPE factors stay fp32: they are tiny and their precision matters
        w = gf.load(name, device=device, dtype=torch.float32 if len(t.shape) == 1 else dtype)
        if cfg.traits.qk_interleaved and (".attn_q." in name or ".attn_k." in name):
            w = deinterleave_heads(w, cfg.n_heads if ".attn_q." in name else cfg.n_kv_heads)
        weights[name] = w
        sums.append(w.sum(dtype=torch.float32))
    check_finite(gf, checked + [n for n in names if n not in skip], sums)
    model = Decoder(cfg, weights, device, dtype, head_q8=head_q8, max_positions=max_positions, head_file=head_file,
                    embed_file=embed_file)
    if int8:
        from ..quant.cpu_linear import quantize_cpu_model

        ops = quantize_cpu_model(model, cached, int4_blocks(gf, cfg) if cpu_int4 and cached is None else None)
        if cache_at is not None and cached is None:
            cc.save_in_background(cache_at, ops)
    return model
