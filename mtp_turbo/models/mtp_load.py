"""Loading an MTP head GGUF with the --draft-quant weight policy.

Owns: applying the per-matrix format policy (mtp_head.policy_fmt: q/o, fc_embedding, fc_hidden
and the FFN in the chosen format; K/V in Q8_0; norms float; the gathered LM head in the main
model's format unless told otherwise) to a file's weights, packing the matrices for the GEMV
kernels, and checking the head belongs to the main model. Ignores: the head's math (mtp_head.py),
drafting (spec/drafters/mtp.py), the GEMV kernels (quant/), writing heads (train/export.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..errors import ModelFileError
from .mtp_head import (
    ARCH, DRAFT_QUANT_KEYS, DRAFT_QUANTS, GEMV_BACKENDS, HEAD_QUANTS, HIDDEN_SOURCES, REQUANT_FMT, MTPConfig, MTPHead,
    policy_fmt, tensor_names,
)


def policy_bytes(W: dict[str, torch.Tensor], draft_quant: str,
                 stored: dict[str, np.ndarray] | None = None) -> dict[str, tuple[str, np.ndarray]]:
    """GGUF bytes of every matrix of W under the policy: key -> (format, uint8 [rows, row bytes]).
    stored: key -> the file's own Q8_0 bytes, used as they are where the target is Q8_0 (so q8_0
    packs exactly what the file holds). bf16: {} (everything stays dense)."""
    from ..quant.formats import quantize

    stored = stored or {}
    out = {}
    for k, w in W.items():
        pf = None if k.endswith("norm") else policy_fmt(draft_quant, k)
        if pf is None:
            continue
        fmt, qname = pf
        if fmt == "q8_0" and k in stored:
            out[k] = (fmt, np.asarray(stored[k]).reshape(w.shape[0], -1))
        else:
            assert w.ndim == 2 and w.shape[1] % 32 == 0, (k, tuple(w.shape))
            out[k] = (fmt, quantize(w.detach().float().cpu(), qname))
    return out


def apply_draft_quant(W: dict[str, torch.Tensor], draft_quant: str,
                      pbytes: dict | None = None) -> dict[str, torch.Tensor]:
    """The --draft-quant policy on float32 weights as read from the head file (its matrices are
    Q8_0, so these are the dequantized Q8_0 values) -> a new dict, same keys, float32.

    q8_0: as stored. bf16: also as stored: the file is already Q8_0, so bf16 cannot recover more
    precision; the values are only cast to the compute dtype by the caller (no requantization).
    q5_0 / q4_0: the DRAFT_QUANT_KEYS matrices are requantized from the Q8_0 values (q4_0 with the
    Lloyd scale search) and dequantized back: exactly the values the packed GEMV reads (see
    pack_ops), so the dense and the packed path compute with the same weights. pbytes: the
    policy_bytes of W when the caller has them (else computed here)."""
    from ..errors import ConfigError
    from ..quant.formats import dequantize, ggml_type_of

    if draft_quant not in DRAFT_QUANTS:
        raise ConfigError(f"draft-quant must be one of {', '.join(DRAFT_QUANTS)}, got {draft_quant!r}")
    out = dict(W)
    if REQUANT_FMT[draft_quant] is None:
        return out
    if pbytes is None:
        pbytes = policy_bytes({k: W[k] for k in DRAFT_QUANT_KEYS}, draft_quant)
    for k in DRAFT_QUANT_KEYS:
        fmt, raw = pbytes[k]
        w = W[k]
        assert w.dtype == torch.float32, (k, w.dtype)
        out[k] = dequantize(torch.from_numpy(np.ascontiguousarray(raw)).reshape(-1).to(w.device), ggml_type_of(fmt),
                            tuple(w.shape)).to(torch.float32)
    return out


def uses_packed(gemv_backend: str, device) -> bool:
    """Whether the drafter computes with packed weights: 'dense' never, 'torch' / 'triton'
    always, 'auto' on CUDA when Triton imports (the CPU keeps the dense F.linear path)."""
    assert gemv_backend in GEMV_BACKENDS, gemv_backend
    if gemv_backend == "auto":
        from ..quant.gemv import kernels_available

        return torch.device(device).type == "cuda" and kernels_available()
    return gemv_backend != "dense"


def pack_ops(W: dict[str, torch.Tensor], packed: dict, head, cfg: MTPConfig, backend: str = "auto",
             tile=None) -> dict:
    """The cached drafter's ops: W (norms, dense matrices) with every packed matrix replaced by a
    PackedLinear; q|k|v fused into one "qkv" layer and gate|up into "gate_up" when their formats
    match (one GEMV call, one launch), fc_embedding | fc_hidden as "fc" when packed has it (joined
    along K by load_head); head (a PackedWeight or None) as ops["head"].
    backend: PackedLinear's ("auto" | "torch" | "triton"); tile: a TileConfig for all (A/B)."""
    from ..quant.gemv import PackedLinear
    from ..quant.repack import PackedWeight

    mk = (lambda pw: PackedLinear(pw, tile, "auto" if backend in ("auto", "dense") else backend))
    ops = dict(W)
    for fused, parts in (("qkv", ("q", "k", "v")), ("gate_up", ("gate", "up"))):
        if all(p in packed for p in parts) and len({packed[p].fmt for p in parts}) == 1:
            ops[fused] = mk(PackedWeight.cat([packed[p] for p in parts]))
            for p in parts:
                del ops[p]
    for k, pw in packed.items():
        if k in ops:
            ops[k] = mk(pw)
    if "fc" in packed:  # fc_embedding | fc_hidden as one packed GEMV: its parts are not read
        del ops["fc_e"], ops["fc_h"]
    if head is not None:
        ops["head"] = mk(head)
    return ops


def _main_head(main_gguf, vocab_ids: torch.Tensor | None, main=None):
    """The main model's LM head (tied embedding) in its own block format, rows gathered: from
    the Q8_0 codes the main model keeps on its device (Decoder.head_q8: no second read and copy
    of the file's 178 MB on the host), else from the file on the CPU; None when neither is there
    or the file's format has no GEMV kernel."""
    from ..quant.repack import BLOCK_FORMATS, PackedWeight

    kept = getattr(main, "head_q8", None)
    if kept is not None:  # the model's own PackedWeight: a full-vocabulary head shares its GEMV layout
        pw = main.head_packed()
        return pw if vocab_ids is None else pw.rows(vocab_ids.to(kept[0].device))
    info = None if main_gguf is None else main_gguf.tensors.get("token_embd.weight")
    if info is None:
        return None
    fmt = {8: "q8_0", 6: "q5_0", 2: "q4_0"}.get(int(info.ggml_type))  # ggml type ids
    if fmt not in BLOCK_FORMATS:
        return None
    pw = PackedWeight.from_gguf_bytes(main_gguf.raw("token_embd.weight"), fmt, tuple(info.shape))
    return pw if vocab_ids is None else pw.rows(vocab_ids.cpu())


def int8_ops(W: dict[str, torch.Tensor], head) -> dict:
    """The drafter's ops on the CPU beside a main model held in int8 (quant/cpu_linear.py): W's norms,
    its matrices as Int8Linear with q|k|v, gate|up and fc_embedding|fc_hidden fused, and `head` (the LM
    head rows' Int8Linear): a draft step reads ~30 MB instead of ~115 MB of float32."""
    from ..quant.cpu_linear import Int8Linear

    ops = {k: w for k, w in W.items() if k.endswith("norm")}
    ops["qkv"] = Int8Linear(torch.cat([W["q"], W["k"], W["v"]]))
    ops["gate_up"] = Int8Linear(torch.cat([W["gate"], W["up"]]))
    for k in ("fc", "o", "down"):
        ops[k] = Int8Linear(W[k])
    ops["head"] = head
    return ops


def load_head(path, main, device=None, dtype=None, expect_sha: str | None = None,
              draft_quant: str = "q8_0", head_quant: str = "main", gemv_backend: str = "auto",
              tile=None, main_gguf=None) -> MTPHead:
    """MTPHead from a head GGUF, tied to the main model `main` (a Decoder of the Gemma-3 family), with the --draft-quant
    policy `draft_quant` applied (see apply_draft_quant). Raises ModelFileError when the file is
    not a head, misses tensors, or was trained for another base model.

    On the packed path (uses_packed(gemv_backend, device)) the drafter's matrices are PackedLinear
    layers over the policy's bytes: q/o, fc_embedding, fc_hidden, FFN in draft_quant, K/V Q8_0
    (bf16: all dense). head_quant: "main" = the LM head rows in the main model's stored format
    (its token_embd bytes from main_gguf, a GGUFFile; dense rows when absent or not a block
    format), "bf16" = dense rows, or q8_0 / q5_0 / q4_0 = requantized from the main's values."""
    from ..errors import ConfigError
    from ..io.gguf_file import GGUFFile

    if head_quant not in HEAD_QUANTS:
        raise ConfigError(f"draft head format must be one of {', '.join(HEAD_QUANTS)}, got {head_quant!r}")
    gf = GGUFFile(path)
    if gf.metadata.get("general.architecture") != ARCH:
        raise ModelFileError(f"{path}: not an MTP head file (architecture {gf.metadata.get('general.architecture')!r}, expected {ARCH!r})")
    base = gf.metadata.get("mtp.base_model_sha256")
    if expect_sha is not None and base != expect_sha:
        raise ModelFileError(f"{path}: this MTP head was trained for the model with sha256 {str(base)[:16]}..., "
                             f"but the loaded model's sha256 is {expect_sha[:16]}...; train a head for it with "
                             "`mtp-turbo train-mtp` or pass the right --drafter")
    src = gf.metadata.get("mtp.hidden_source", "pre_norm")
    if src not in HIDDEN_SOURCES:
        raise ModelFileError(f"{path}: mtp.hidden_source {src!r} is not one of {HIDDEN_SOURCES}")
    cfg = MTPConfig.for_main(main.cfg, hidden_source=src)
    gate = gf.tensors.get(tensor_names(cfg)["gate"])
    if gate is not None:  # a head may have a narrower FFN than its main model (train-mtp --ffn)
        cfg = dataclasses.replace(cfg, ffn=int(gate.shape[0]))
    device = main.device if device is None else torch.device(device)
    dtype = main.dtype if dtype is None else dtype
    W, stored = {}, {}
    for k, name in tensor_names(cfg).items():
        if name not in gf.tensors:
            raise ModelFileError(f"{path}: missing tensor {name}")
        W[k] = gf.load(name, device=device, dtype=torch.float32)  # float32 holds Q8_0 values exactly
        if not k.endswith("norm") and int(gf.tensors[name].ggml_type) == 8:  # Q8_0 blocks as stored
            stored[k] = gf.raw(name)
    packed_path = uses_packed(gemv_backend, device)
    # the policy's bytes, once: the packed layers read them and the dense values are decoded from them
    pbytes = policy_bytes(W, draft_quant, stored) if packed_path or REQUANT_FMT.get(draft_quant) else None
    Wq = apply_draft_quant(W, draft_quant, pbytes)
    ids = gf.metadata.get("mtp.vocab_ids")
    vocab_ids = None if ids is None else torch.as_tensor(np.asarray(ids, dtype=np.int64))
    if vocab_ids is not None and (vocab_ids.min() < 0 or vocab_ids.max() >= main.cfg.vocab_size):
        raise ModelFileError(f"{path}: mtp.vocab_ids outside the model's vocabulary")
    head_pw, head_rows = None, None
    if head_quant in ("q8_0", "q5_0", "q4_0"):
        from ..quant.formats import quantize
        from ..quant.repack import PackedWeight

        rows = main.embed if vocab_ids is None else main.embed[vocab_ids.to(main.embed.device)]
        raw = quantize(rows.float().cpu(), REQUANT_FMT.get(head_quant) or head_quant)
        head_pw = PackedWeight.from_gguf_bytes(raw, head_quant, tuple(rows.shape))
        head_rows = head_pw.dequantize().to(device, dtype)
    elif head_quant == "main" and packed_path:
        head_pw = _main_head(main_gguf, vocab_ids, main)
    # fc_embedding | fc_hidden joined along K: one GEMV over both normed inputs (a block format's
    # rows are independent 32-blocks, so joined rows are the parts' bytes side by side)
    Wq["fc"] = torch.cat([Wq["fc_e"], Wq["fc_h"]], dim=1)
    if pbytes and "fc_e" in pbytes and pbytes["fc_e"][0] == pbytes["fc_h"][0]:
        pbytes["fc"] = (pbytes["fc_e"][0], np.concatenate([pbytes["fc_e"][1], pbytes["fc_h"][1]], axis=1))
    # cast matrices to the compute dtype (norms stay float32)
    W = {k: w if k.endswith("norm") else w.to(dtype) for k, w in Wq.items()}
    ops = None
    if device.type == "cpu" and getattr(main, "head_op", None) is not None:  # the main model's int8 CPU path
        from ..quant.cpu_linear import Int8Linear

        if head_rows is None and main.cfg.tied_head and isinstance(main.head_op, Int8Linear):
            # a tied main head's rows are its embedding's: the same codes (~0.1 s of a one-shot
            # CPU start not spent quantizing the 32768 rows again)
            head = main.head_op if vocab_ids is None else main.head_op.rows(vocab_ids)
        elif head_rows is not None:
            head = Int8Linear(head_rows)
        else:
            # (an untied main model: its embedding is the dense table, load.py keeps bytes only when tied)
            head = Int8Linear(main.embed if vocab_ids is None else main.embed[vocab_ids.to(main.embed.device)])
        ops = int8_ops(W, head)
    elif packed_path:
        from ..quant.repack import PackedWeight

        packed = {k: PackedWeight.from_gguf_bytes(raw, fmt, tuple(W[k].shape)).to(device)
                  for k, (fmt, raw) in pbytes.items()}
        ops = pack_ops(W, packed, None if head_pw is None else head_pw.to(device), cfg, gemv_backend, tile)
    return MTPHead(cfg, W, main.embedding_table(), vocab_ids, device, dtype, ops=ops, head_rows=head_rows)
