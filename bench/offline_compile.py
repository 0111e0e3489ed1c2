"""Every Triton kernel launch of the engine's GPU workloads, compiled offline for sm_90 under another Triton.

Why: the H200 image has triton 3.6 and device time is short; a kernel that runs in this machine's
interpreter (triton 3.9, TRITON_INTERPRET=1) may not compile under 3.6 (language API, type
promotion, constexpr handling, dot shape / dtype rules, ints specialised to 1, bf16 operands).
This finds such failures on a CPU machine: Triton compiles for a CUDA target without a GPU and its
wheel bundles ptxas (bench/sass_loop.py does it for one GEMV kernel).

Two steps (run both by default):
1. record (this interpreter, TRITON_INTERPRET=1): the workloads below run with
   `InterpretedFunction.run` (what `kernel[grid](...)` calls under the interpreter) and
   `GluonJITFunction.run` wrapped: each launch is recorded (kernel module + name, each argument:
   tensor -> dtype and 16-byte alignment of its pointer, int -> value, float, bool, str; the
   constexprs; num_warps / num_stages / other compile options) and deduplicated by what Triton's
   launcher specialises on (pointer dtype + alignment; non-constexpr ints: 32/64-bit, == 1 and
   % 16 unless do_not_specialize; constexpr values; options). The launch is recorded before it
   runs; where a workload is "dry" (real sizes, bf16 where the interpreter cannot, the GPU branch
   of the GEMV dispatch) it is recorded and not executed: outputs are then garbage, which the
   launch sequence never depends on. Gluon kernels (frag8 GEMV) never run here.
   The GEMV dispatch takes its CUDA branch (x_frag8 with PDL, frag8x making x itself, the PTX and
   bf16 tensor-core variants, not the interpreter's F32_OPERANDS ones) by seeing x as a tensor
   whose is_cuda is True; everything else in it is the real code.
2. compile (a subprocess importing the other Triton, PYTHONPATH=<--triton>:<repo>): each recorded
   launch rebuilt as that Triton's launcher would see it (its own binder and specialisation:
   MockTensor-like pointers with the recorded alignment, the recorded ints / floats / constexprs),
   then `triton.compile(ASTSource or GluonASTSource, target=GPUTarget("cuda", 90, 32), options)`
   with the launch's num_warps / num_stages / enable_fp_fusion / launch_pdl. OK: registers and
   spills (ptxas -v of that compile, sm_90a) and shared memory; FAIL: the compiler's message.
   One worker process compiles the list in order; a compile that hangs past --timeout or kills
   the worker is reported (TIMEOUT / CRASH) and the worker restarts after it.

Workloads (small sizes; --workloads picks): main (FusedDecoder.forward on a tiny random Gemma-3,
rows 1 and 4, fp32 and bf16, plus the Gemma-3-270M shapes dry, and bench/decode_bench.py's
tile variants at those shapes; with the Q8_0 head, rows 1-8: its frag8 GEMV's CUDA branch),
mtp (MTPDrafter kernels="triton" on a tiny head, fp32 and bf16, dense and packed q8_0 ops; the 270M head's shapes dry), sampler
(sample_tokens / sample_rows for the brief's configurations at V = 5000; dry, those plus the
engine's default SamplerConfig() and every configuration of tests/sampling/test_fused*.py at
V = 5000 and 262144), gemv (gemv_packed with default_tile's Hopper and pre-Hopper tiles, q8_0 / q5_0 /
q4_0, 1-4 rows, fp32 and bf16 x, on each tile class's matrix shapes; dry, CUDA branch), glue (the
round program's index kernels, spec/glue.py: round inputs and acceptance for k = 0..7 and both
rules, plain steps, a round staged ahead with and without a penalty window, draft slots; the
embedding rows, models/embed.py; the greedy pick's id map into a slot), ngram (the n-gram lookup,
spec/drafters/ngram.py, at buffers of 2k / 4k / 128k tokens, k = 1..7, ngram_max 4 and 16); opt-in:
gemv_tiles (every SUPPORTED_TILES entry, 1 and 4 rows, bf16 x).
To try a fix without touching the repository: copy mtp_turbo/ elsewhere, patch the copy, and
--compile-only the recorded file with --src pointing at the copy's parent.
Also works with another Triton (--triton DIR: any directory holding a `triton` package).

    pip download --no-deps triton==3.6.0 -d /tmp/w --python-version 3.11 --only-binary=:all: \\
        --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64
    pip install --no-deps --target /tmp/t36 /tmp/w/triton-3.6.0*.whl
    python bench/offline_compile.py --out /tmp/oc.json                 # record + compile
    python bench/offline_compile.py --record-only /tmp/launches.json   # step 1 only
    python bench/offline_compile.py --compile-only /tmp/launches.json --out /tmp/oc.json
Options: --triton DIR (default /tmp/t36), --workloads main,mtp,sampler,gemv, --dry (execute
nothing), --only SUBSTR (compile the launches whose kernel name contains it), --timeout S.
Exit status 1 when any launch fails to compile.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

TARGET = ("cuda", 90, 32)
# what the launcher checks when it loads a kernel (CompiledKernel._init_handles), for an H100 / H200:
# dynamic shared memory per block (opt-in maximum) and registers per block
MAX_SHARED = 232448
MAX_REGS_PER_BLOCK = 65536


# ============================================================================ step 1: record

def _dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


class Recorder:
    """Collects launches of interpreted (and Gluon) kernels, deduplicated by specialisation key."""

    def __init__(self):
        self.launches: dict[str, dict] = {}
        self.order: list[str] = []
        self.workload = "?"
        self.dry = 0  # > 0: record, do not execute
        self.errors: list[dict] = []  # workloads that raised

    # ---- argument descriptors
    def _desc(self, v):
        import numpy as np
        import torch

        if isinstance(v, torch.Tensor):
            return {"t": "tensor", "dtype": _dtype_name(v.dtype), "mod16": int(v.data_ptr() % 16)}
        if isinstance(v, (bool, np.bool_)):
            return {"t": "bool", "v": bool(v)}
        if isinstance(v, (int, np.integer)):
            return {"t": "int", "v": int(v)}
        if isinstance(v, (float, np.floating)):
            return {"t": "float", "v": float(v)}
        if v is None:
            return {"t": "none"}
        if isinstance(v, str):
            return {"t": "str", "v": v}
        if isinstance(v, (tuple, list)):
            return {"t": "tuple", "v": [self._desc(x) for x in v]}
        if hasattr(v, "value") and type(v).__name__ == "constexpr":
            return self._desc(v.value)
        if type(v).__name__ == "dtype" and type(v).__module__.startswith("triton"):
            return {"t": "tldtype", "v": str(v)}
        return {"t": "unsupported", "v": repr(v)[:200]}

    @staticmethod
    def _spec_key(p: dict):
        """What the launcher specialises on for one parameter (Triton 3.x rules)."""
        a = p["arg"]
        if p["constexpr"]:
            return ["c", a]
        t = a["t"]
        if t == "tensor":
            return ["*", a["dtype"], (a["mod16"] == 0) and not p["dnsa"]]
        if t == "int":
            v = a["v"]
            width = "i32" if -2**31 <= v < 2**31 else ("u64" if v >= 2**63 else "i64")
            if p["dns"]:
                return ["i", width]
            return ["i", width, v == 1, v % 16 == 0]
        if t in ("float", "bool"):
            return [t]
        return ["c", a]  # None, str, tuples...: passed as constants

    def record(self, kernel, args, kwargs, grid, gluon: bool) -> dict:
        fn = kernel.fn
        sig = inspect.signature(fn)
        names = list(sig.parameters)
        params_kw = {k: v for k, v in kwargs.items() if k in names}
        options = {k: v for k, v in kwargs.items() if k not in names}
        bound = sig.bind(*args, **params_kw)
        bound.apply_defaults()
        if gluon:
            dns = {p.name for p in kernel.params if p.do_not_specialize}
            dnsa = {p.name for p in kernel.params if p.do_not_specialize_on_alignment}
        else:
            kw = getattr(kernel, "kwargs", {}) or {}

            def names_of(lst):
                return {names[i] if isinstance(i, int) else i for i in (lst or [])}

            dns, dnsa = names_of(kw.get("do_not_specialize")), names_of(kw.get("do_not_specialize_on_alignment"))
        params = []
        for n, prm in sig.parameters.items():
            params.append({"name": n, "constexpr": "constexpr" in str(prm.annotation), "dns": n in dns,
                           "dnsa": n in dnsa, "arg": self._desc(bound.arguments[n])})
        opts = {k: (v if isinstance(v, (int, float, bool, str)) or v is None else repr(v)) for k, v in options.items()}
        kname = f"{fn.__module__}:{fn.__name__}"
        key = json.dumps([kname, [self._spec_key(p) for p in params], sorted(opts.items())], sort_keys=True)
        rec = self.launches.get(key)
        if rec is None:
            rec = {"id": f"L{len(self.order):03d}", "kernel": kname, "gluon": gluon, "params": params,
                   "options": opts, "grid": repr(grid) if not callable(grid) else "callable",
                   "workloads": [], "launches": 0, "interp": "not run"}
            self.launches[key] = rec
            self.order.append(key)
        rec["launches"] += 1
        if self.workload not in rec["workloads"]:
            rec["workloads"].append(self.workload)
        return rec

    def note_run(self, rec, status: str):
        # "ran" beats "skipped" beats "not run"; an interpreter error is kept
        if rec["interp"].startswith("interpreter error"):
            return
        if status.startswith("interpreter error") or status == "ran" or rec["interp"] == "not run":
            rec["interp"] = status

    def dump(self) -> list[dict]:
        return [self.launches[k] for k in self.order]


REC = Recorder()


def install_recorder():
    """Wrap the launch paths (call after TRITON_INTERPRET=1 is set, before kernels are built)."""
    from triton.runtime.interpreter import InterpretedFunction

    real_run = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        rec = REC.record(self, args, kwargs, grid, gluon=False)
        if warmup:
            return None
        if REC.dry:
            REC.note_run(rec, "skipped")
            return None
        try:
            out = real_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        except Exception as e:  # noqa: BLE001 - record and go on: the signature is what matters
            REC.note_run(rec, f"interpreter error: {type(e).__name__}: {str(e)[:300]}")
            return None
        REC.note_run(rec, "ran")
        return out

    InterpretedFunction.run = run
    try:
        from triton.experimental.gluon._runtime import GluonJITFunction
    except ImportError:
        return

    def grun(self, *args, grid, warmup, **kwargs):  # Gluon kernels cannot run without a GPU
        rec = REC.record(self, args, kwargs, grid, gluon=True)
        REC.note_run(rec, "skipped")

    GluonJITFunction.run = grun


@contextlib.contextmanager
def workload(name: str, dry: bool = False):
    REC.workload = name
    REC.dry += int(dry)
    t0 = time.time()
    n0 = sum(r["launches"] for r in REC.launches.values())
    try:
        yield
    except Exception as e:  # noqa: BLE001
        REC.errors.append({"workload": name, "error": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc()[-3000:]})
        print(f"  workload {name}: FAILED {type(e).__name__}: {e}", file=sys.stderr)
    finally:
        REC.dry -= int(dry)
        n1 = sum(r["launches"] for r in REC.launches.values())
        print(f"  {name}: {n1 - n0} launches, {len(REC.order)} distinct so far ({time.time() - t0:.1f} s"
              f"{', dry' if dry or REC.dry else ''})", file=sys.stderr)


_CUDA_VIEW = None


def _cuda_view_type():
    global _CUDA_VIEW
    if _CUDA_VIEW is None:
        import torch

        class CudaView(torch.Tensor):
            """A CPU tensor that says it is on CUDA: the GEMV dispatch then takes its GPU branch."""

            @property
            def is_cuda(self):
                return True

        _CUDA_VIEW = CudaView
    return _CUDA_VIEW


@contextlib.contextmanager
def gemv_cuda_branch():
    """kernels.gemv_packed sees x as a CUDA tensor (its launches recorded, not executed)."""
    from mtp_turbo.quant import kernels as qk

    real = qk.gemv_packed
    view = _cuda_view_type()

    def fake(x, w, tile, out):
        REC.dry += 1
        try:
            real(x.as_subclass(view), w, tile, out)
        finally:
            REC.dry -= 1

    qk.gemv_packed = fake
    try:
        yield
    finally:
        qk.gemv_packed = real


# ---------------------------------------------------------------------------- workloads

def _gemma(cfg, dtype, random: bool, seed: int = 0, head_q8: bool = False):
    """A Decoder of cfg's family with random (tiny) or uninitialised (dry, real sizes) weights:
    matrices in dtype, norms and biases fp32 (as models/load.py); head_q8: the head's Q8_0 codes and
    scales kept (as the loader does on CUDA; the fused step's head then runs the frag8 GEMV on them)."""
    import torch

    from mtp_turbo.models.arch import tensor_shapes
    from mtp_turbo.models.decoder import Decoder

    g = torch.Generator().manual_seed(seed)
    D = cfg.hidden

    def mk(shape, vec, scale=0.2):
        dt = torch.float32 if vec else dtype
        if not random:
            return torch.ones(shape, dtype=dt) if vec else torch.empty(shape, dtype=dt)
        t = torch.randn(*shape, generator=g) * scale
        return (1 + t if vec else t).to(dt)

    w = {name: mk(shape, len(shape) == 1, 1.0 if name == "token_embd.weight" else 0.2)
         for name, shape in tensor_shapes(cfg).items()}
    head = "token_embd.weight" if cfg.tied_head else "output.weight"
    q8 = None
    if head_q8 and random:
        from mtp_turbo.quant.repack import PackedWeight

        pw = PackedWeight.from_dense(w[head].float(), "q8_0")
        q8, w[head] = (pw.qs, pw.scales), pw.dequantize().to(dtype)
    elif head_q8:
        q8 = (torch.zeros(cfg.vocab_size, D, dtype=torch.int8),
              torch.zeros(cfg.vocab_size, D // 32, dtype=torch.float16))
    return Decoder(cfg, w, "cpu", dtype, head_q8=q8)


def _family_cfg(family, **kw):
    """A tiny model of another family (tests/models/tiny_models.py's shapes), or real shapes by kw."""
    from mtp_turbo.models.arch import ModelConfig, Rope

    c = dict(vocab_size=300, hidden=48, n_layers=3, n_heads=6, n_kv_heads=2, head_dim=32, ffn=80, eps=1e-6,
             rope_global=Rope(1e6), rope_local=Rope(1e6), sliding_window=0, sliding_pattern=0,
             query_scale=32 ** -0.5, context_length=256, qkv_bias=family == "qwen2", tied_head=family != "qwen2")
    c.update(kw)
    c["query_scale"] = c["head_dim"] ** -0.5
    return ModelConfig(family=family, **c)


# published shapes the registry's models and the synthetic benchmarks run at (dry: compile only)
REAL_SHAPES = {
    "SmolLM2-135M": ("llama", dict(vocab_size=49152, hidden=576, n_layers=2, n_heads=9, n_kv_heads=3, head_dim=64,
                                   ffn=1536, context_length=4096)),
    "Qwen2.5-0.5B": ("qwen2", dict(vocab_size=151936, hidden=896, n_layers=2, n_heads=14, n_kv_heads=2, head_dim=64,
                                   ffn=4864, context_length=4096)),
    "Qwen2.5-1.5B": ("qwen2", dict(vocab_size=151936, hidden=1536, n_layers=2, n_heads=12, n_kv_heads=2, head_dim=128,
                                   ffn=8960, context_length=4096)),
}


def _tiny_cfg(**kw):
    from mtp_turbo.models.arch import ModelConfig, Rope

    # tests/models/test_fused.py tiny_model: hidden/ffn/vocab not powers of two nor tile multiples
    c = dict(vocab_size=300, hidden=48, n_layers=6, n_heads=4, n_kv_heads=1, head_dim=32, ffn=80, eps=1e-6,
             rope_global=Rope(1e6), rope_local=Rope(1e4), sliding_window=16, sliding_pattern=3, query_scale=32 ** -0.5,
             context_length=256)
    c.update(kw)
    return ModelConfig(family="gemma3", **c)


def _real_cfg(layers=6, vocab=262144, ctx=4096, hidden=640, ffn=2048, heads=4, kv_heads=1, window=512):
    from mtp_turbo.models.arch import ModelConfig, Rope

    # Gemma-3-270M (the default model; the MTP head's tensors in mtp_turbo/data have these sizes);
    # layers cut to 6 (5 sliding + 1 global: the launch signatures are per kind, not per layer)
    return ModelConfig(family="gemma3", vocab_size=vocab, hidden=hidden, n_layers=layers, n_heads=heads,
                       n_kv_heads=kv_heads, head_dim=256, ffn=ffn, eps=1e-6, rope_global=Rope(1e6), rope_local=Rope(1e4),
                       sliding_window=window, sliding_pattern=6, query_scale=256 ** -0.5, context_length=ctx)


def wl_main(dry_all: bool):
    import torch

    from mtp_turbo.cache.kv import KVCache
    from mtp_turbo.models import fused

    def run(cfg, dtype, random, rows, n_prefill, capacity, tiles=None, head_q8=False):
        m = _gemma(cfg, dtype, random, head_q8=head_q8)
        kv = KVCache(cfg.n_layers, capacity, cfg.n_kv_heads, cfg.head_dim, "cpu", dtype)
        dec = fused.FusedDecoder(m, kv, **({"tiles": tiles} if tiles else {}))
        g = torch.Generator().manual_seed(1)
        for T in rows:
            toks = torch.randint(0, cfg.vocab_size, (T,), generator=g)
            dec.forward(toks, torch.arange(n_prefill, n_prefill + T))

    for dt in ("float32", "bfloat16"):
        with workload(f"main tiny {dt} rows 1,4", dry=dry_all):
            run(_tiny_cfg(), getattr(torch, dt), True, (1, 4), 40, 96)
    with workload("main tiny bfloat16 without tails (tile option)", dry=dry_all):
        run(_tiny_cfg(), torch.bfloat16, True, (1, 4), 40, 96, fused.FusedTiles(tails=False))
    for dt in ("bfloat16", "float32"):
        with workload(f"main Gemma-3-270M shapes {dt} rows 1,4,8", dry=True):
            run(_real_cfg(), getattr(torch, dt), False, (1, 4, 8), 600, 2048)
    # a prefill chunk (no head, the tails' work as kernels of their own) at the 270M shapes, 128 rows
    with workload("main Gemma-3-270M shapes bfloat16, a 128-row prefill chunk", dry=True):
        m = _gemma(_real_cfg(), torch.bfloat16, False)
        kv = KVCache(m.cfg.n_layers, 2048, m.cfg.n_kv_heads, m.cfg.head_dim, "cpu", torch.bfloat16)
        fused.FusedDecoder(m, kv, prefill_rows=128).forward(torch.zeros(128, dtype=torch.int64),
                                                           torch.arange(600, 728), head=False)
    with workload("main Gemma-3-270M bfloat16, the split merge, the tails (tile options)", dry=True):
        for v in ({"combine_split": 4}, {"combine_split": 4, "combine_chunks": 64},
                  {"combine_split": 1, "combine_chunks": 16}, {"tails": False},
                  # gpu_session.sh s23-tiles' sweep
                  {"bk_tall": 1024, "stages_tall": 2}, {"bk_tall": 1024, "stages_tall": 1},
                  {"bk_tall": 1024, "stages_tall": 1, "warps_tall": 8}, {"bn_tall": 16, "bk_tall": 1024, "stages_tall": 2},
                  {"stages_tall": 4}, {"stages_small": 2}, {"stages_gated": 2}):
            run(_real_cfg(), torch.bfloat16, False, (1, 4), 600, 2048, fused.FusedTiles(**v))
    # the Q8_0 head (FusedTiles.head_q8, the default where the model keeps the codes: CUDA): 1-4 rows
    # one frag8 launch, 5-8 rows two. Tiny: the CPU branch (x_frag8 interpreted, the emulation);
    # the 270M shapes: the CUDA branch (x_frag8 with PDL, then the Gluon gemv_frag8), dry. The head
    # has 32768 rows there (its building is CPU work): 262144 specialises alike (N and NT % 16 == 0)
    for dt in ("float32", "bfloat16"):
        with workload(f"main tiny {dt} with the Q8_0 head, rows 1,4,5,8", dry=dry_all):
            run(_tiny_cfg(hidden=96), getattr(torch, dt), True, (1, 4, 5, 8), 40, 96, head_q8=True)
    with workload("main Gemma-3-270M shapes with the Q8_0 head (frag8, CUDA branch), rows 1,4,5,8", dry=True), \
            gemv_cuda_branch():
        for dt in ("bfloat16", "float32"):
            run(_real_cfg(vocab=32768), getattr(torch, dt), False, (1, 2, 3, 4, 5, 8), 600, 2048, head_q8=True)
        run(_real_cfg(vocab=32768), torch.bfloat16, False, (1, 5), 600, 2048, fused.FusedTiles(tails=False),
            head_q8=True)
    with workload("main the greedy pick on the head's logits (1, 4, 8 rows of 262144; 1 of 32768)", dry=True):
        from mtp_turbo.models.greedy import GreedyPick
        for T, V in ((1, 262144), (4, 262144), (8, 262144), (1, 32768)):
            GreedyPick("triton")(torch.zeros(T, V))
    # programmatic dependent launch (FusedTiles.pdl, pdl_w0): CUDA sm_90+ only, so the decoder is told
    # it runs there (launch_pdl in the recorded options, PDL in the constexprs)
    with workload("main Gemma-3-270M bfloat16, programmatic dependent launch (tile options)", dry=True):
        real = fused.fk.pdl_supported
        fused.fk.pdl_supported = lambda device: True
        try:
            for v in ({"pdl": 1}, {"pdl": 2}, {"pdl": 1, "pdl_w0": True}, {"pdl_w0": True}):
                run(_real_cfg(), torch.bfloat16, False, (1, 4), 600, 2048, fused.FusedTiles(**v))
            m = _gemma(_real_cfg(), torch.bfloat16, False)
            kv = KVCache(m.cfg.n_layers, 2048, m.cfg.n_kv_heads, m.cfg.head_dim, "cpu", torch.bfloat16)
            fused.FusedDecoder(m, kv, fused.FusedTiles(pdl=1, pdl_w0=True), prefill_rows=128).forward(
                torch.zeros(128, dtype=torch.int64), torch.arange(600, 728), head=False)
        finally:
            fused.fk.pdl_supported = real
    # the other families (arch.py): pre-norm, SwiGLU, no q/k norms, QKV biases, GQA ratios past a
    # verify's rows per attention program; tiny fp32 / bf16 run, the published shapes dry
    for fam in ("llama", "qwen2"):
        for dt in ("float32", "bfloat16"):
            with workload(f"main tiny {fam} {dt} rows 1,4,8", dry=dry_all):
                run(_family_cfg(fam), getattr(torch, dt), True, (1, 4, 8), 40, 96)
        with workload(f"main tiny {fam} bfloat16 without tails", dry=dry_all):
            run(_family_cfg(fam), torch.bfloat16, True, (1, 4), 40, 96, fused.FusedTiles(tails=False))
    for name, (fam, shape) in REAL_SHAPES.items():
        with workload(f"main {name} shapes bfloat16 rows 1,4,8 and a 128-row prefill chunk", dry=True):
            cfg = _family_cfg(fam, **shape)
            run(cfg, torch.bfloat16, False, (1, 4, 8), 600, 2048)
            m = _gemma(cfg, torch.bfloat16, False)
            kv = KVCache(cfg.n_layers, 2048, cfg.n_kv_heads, cfg.head_dim, "cpu", torch.bfloat16)
            fused.FusedDecoder(m, kv).forward(torch.zeros(128, dtype=torch.int64), torch.arange(600, 728), head=False)
    with workload("main Gemma-3-1B shapes bfloat16 rows 1,4 (sliding window 512, 1152 wide, 6912 FFN)", dry=True):
        run(_real_cfg(layers=6, hidden=1152, ffn=6912), torch.bfloat16, False, (1, 4), 600, 2048)
    with workload("main Gemma-3-4B shapes bfloat16 rows 1,4 (8 / 4 heads, 2560 wide, 10240 FFN)", dry=True):
        run(_real_cfg(layers=6, hidden=2560, ffn=10240, heads=8, kv_heads=4, window=1024), torch.bfloat16, False,
            (1, 4), 600, 2048)
    variants = _decode_bench_tiles()
    with workload(f"main Gemma-3-270M bfloat16, decode_bench.py's {len(variants)} tile variants", dry=True):
        for v in variants:
            run(_real_cfg(), torch.bfloat16, False, (1, 4), 600, 2048, fused.FusedTiles(**v))


def _decode_bench_tiles() -> list[dict]:
    """bench/decode_bench.py TILE_VARIANTS (what its --sweep compiles on the GPU)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_decode_bench", os.path.join(REPO, "bench", "decode_bench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return [v for v in mod.TILE_VARIANTS if v]


def _fake_main(D, V, seed, n):
    """tests/spec/drafters/conftest.py's FakeMain (hidden rows as a function of position and tokens),
    loaded from that file: pytest's importlib mode keeps it out of sys.modules' packages."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "_drafter_conftest", os.path.join(REPO, "tests", "spec", "drafters", "conftest.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FakeMain(D, V, seed=seed, n=n)


def _mtp_head(main_cfg, vocab, dtype, random, packed_fmt=None, head_rows=None, seed=0):
    """An MTPHead for main_cfg: random (tiny) or uninitialised (real sizes) weights; matrices in
    dtype, norms fp32 (as mtp_load.load_head); packed_fmt: the drafter's ops as PackedLinear
    layers (pack_ops, backend triton: on the GEMV kernels) in that block format (K/V q8_0), the
    LM head rows packed too."""
    import torch

    from mtp_turbo.models.mtp_head import (
        DRAFT_QUANT_KEYS,
        MTPConfig,
        MTPHead,
        tensor_names,
    )

    cfg = MTPConfig.for_main(main_cfg)
    D = cfg.hidden
    g = torch.Generator().manual_seed(seed)
    qd, kvd = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    shapes = {"fc_e": (D, D), "fc_h": (D, D), "q": (qd, D), "k": (kvd, D), "v": (kvd, D), "o": (D, qd),
              "gate": (cfg.ffn, D), "up": (cfg.ffn, D), "down": (D, cfg.ffn)}
    W = {}
    for k in tensor_names(cfg):
        if k.endswith("norm"):
            n = cfg.head_dim if k in ("q_norm", "k_norm") else D
            W[k] = 1.0 + 0.1 * torch.randn(n, generator=g) if random else torch.ones(n)
        else:
            s = shapes[k]
            W[k] = (torch.randn(*s, generator=g) / s[1] ** 0.5) if random else torch.zeros(s)
    embed = (torch.randn(vocab, D, generator=torch.Generator().manual_seed(seed + 1)) if random
             else torch.zeros(vocab, D)).to(dtype)
    vocab_ids = None
    if head_rows is not None and head_rows < vocab:
        vocab_ids = torch.arange(0, vocab, vocab // head_rows)[:head_rows]
    ops = None
    Wd = {k: (w if k.endswith("norm") else w.to(dtype)) for k, w in W.items()}
    Wd["fc"] = torch.cat([Wd["fc_e"], Wd["fc_h"]], dim=1)
    if packed_fmt is not None:
        from mtp_turbo.models.mtp_load import pack_ops
        from mtp_turbo.quant.repack import PackedWeight

        W32 = dict(W, fc=torch.cat([W["fc_e"], W["fc_h"]], dim=1))
        packed = {k: PackedWeight.from_dense(W32[k].float(), packed_fmt if k in DRAFT_QUANT_KEYS + ("fc",) else "q8_0")
                  for k in ("q", "k", "v", "o", "gate", "up", "down", "fc")}
        rows = embed if vocab_ids is None else embed[vocab_ids]
        hp = PackedWeight.from_dense(rows.float(), "q8_0")
        ops = pack_ops(Wd, packed, hp, cfg, backend="triton")
    head = MTPHead(cfg, Wd, embed, vocab_ids, "cpu", dtype, ops=ops)
    return head


def _mtp_session(head, V, D, rounds, sink, window, capacity=400, seed=1, prompt=40, sampler=None, real=False):
    import random

    import torch

    from mtp_turbo.spec.drafters.mtp import MTPDrafter

    rng = random.Random(seed)
    dr = MTPDrafter(head, capacity=capacity, sink=sink, window=window, kernels="triton")
    dr.set_sampler(sampler)
    tokens = [rng.randrange(V) for _ in range(prompt)]
    n_rows = len(tokens) - 1
    if real:
        H = torch.zeros(len(tokens), D)
        hid = lambda toks: torch.zeros(len(toks), D)
    else:
        main = _fake_main(D, V, seed, n=capacity + 64)
        H = main.hidden(tokens)
        hid = main.hidden
    for c0 in range(0, n_rows, 17):
        dr.on_prefill(c0, min(n_rows, c0 + 17), H[c0: min(n_rows, c0 + 17)].to(head.dtype).clone(), tokens)
    dr.begin(tokens)
    for r in range(rounds):
        k = (1, 4, 2, 3)[r % 4]
        got = dr.propose(tokens, k)
        a = (k, 0, 1, 2)[r % 4] if got else 0
        a = min(a, len(got))
        m = len(tokens)
        new = tokens + got[:a] + [rng.randrange(V)]
        dr.observe(new, a, hid(new)[m - 1: m + a].to(head.dtype).clone())
        tokens = new


def wl_mtp(dry_all: bool):
    import torch

    from mtp_turbo.sampling.config import SamplerConfig

    V, D = 97, 64  # tests/spec/drafters/conftest.py TinyMTP
    tiny_main = _tiny_cfg(vocab_size=V, hidden=D, n_layers=3, n_heads=2, head_dim=32, ffn=128,
                          sliding_pattern=6, query_scale=32 ** -0.5, context_length=2048)
    for dt in ("float32", "bfloat16"):
        with workload(f"mtp tiny {dt} dense", dry=dry_all):
            _mtp_session(_mtp_head(tiny_main, V, getattr(torch, dt), True), V, D, rounds=4, sink=4, window=16)
    with workload("mtp tiny float32 dense, reduced head + penalties", dry=dry_all):
        pen = SamplerConfig(temperature=0.7, repeat_penalty=1.3, presence_penalty=0.5, penalty_last_n=8)
        _mtp_session(_mtp_head(tiny_main, V, torch.float32, True, head_rows=40), V, D, rounds=3, sink=4,
                     window=16, sampler=pen)
    for dt in ("bfloat16", "float32"):
        with workload(f"mtp tiny {dt} packed q8_0 (GEMV CUDA branch)", dry=True), gemv_cuda_branch():
            _mtp_session(_mtp_head(tiny_main, V, getattr(torch, dt), True, packed_fmt="q8_0"), V, D, rounds=4,
                         sink=4, window=16)
    # the drafter's penalised argmax on CUDA: the fused sampler over its 32768 head rows with a
    # window sequence of penalty_last_n head indices (the interpreter's drafter takes the torch chain)
    with workload("mtp drafter's sampler: V=32768, greedy + penalties, 1 row", dry=True):
        from mtp_turbo.sampling import fused as sfused

        cfg = SamplerConfig(temperature=0.0, repeat_penalty=1.08, presence_penalty=0.4, penalty_last_n=64)
        sfused.sample_tokens(torch.randn(1, 32768), torch.randint(-1, 32768, (64 + 8,)), torch.tensor([64]), cfg,
                             backend="triton")
    real_main = _real_cfg(layers=18, vocab=262144)
    for dt, packed in (("bfloat16", None), ("bfloat16", "q8_0"), ("bfloat16", "q4_0"), ("float32", None)):
        name = f"mtp Gemma-3-270M head shapes {dt} {'packed ' + packed if packed else 'dense'}"
        with workload(name, dry=True), (gemv_cuda_branch() if packed else contextlib.nullcontext()):
            # the real head: 32768 LM-head rows of the 262144 (vocab_ids), sink 64 + window 256
            vocab = 262144 if packed is None else 65536  # packed: fewer embedding rows to quantize (same rows)
            head = _mtp_head(real_main, vocab, getattr(torch, dt), False, packed_fmt=packed, head_rows=32768)
            _mtp_session(head, vocab, 640, rounds=4, sink=64, window=256, capacity=1024, prompt=400, real=True)


SAMPLER_CPU = {  # the brief's / tests/sampling's configurations (CHAIN as tests/sampling/test_fused.py)
    "greedy": dict(temperature=0.0, repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0),
    "greedy + penalties": dict(temperature=0.0),
    "default chain": dict(),
    "top-k 0 + top-p 0.95": dict(top_k=0),
    "last_n -1": dict(penalty_last_n=-1),
    "top-k 0, last_n -1, penalties first": dict(top_k=0, penalty_last_n=-1, repeat_penalty=1.5, order=(
        "penalties", "temperature", "top_k", "top_p", "min_p")),
}
CHAIN = dict(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08, presence_penalty=0.4,
             frequency_penalty=0.1, penalty_last_n=64, seed=3)


def _sampler_configs() -> dict:
    """name -> SamplerConfig: the engine's and server's default SamplerConfig() (no penalties), the
    training generator's chain, and every configuration of tests/sampling/test_fused.py (COMPACT,
    FULL) and test_fused_gpu.py (CASES), read from those files."""
    import importlib.util

    from mtp_turbo.sampling.config import SamplerConfig

    out = {"SamplerConfig() (engine / server default)": SamplerConfig(),
           "train/generate.py chain": SamplerConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.05)}
    for f, names in (("test_fused.py", ("COMPACT", "FULL")), ("test_fused_gpu.py", ("CASES",))):
        try:
            spec = importlib.util.spec_from_file_location(f"_oc_{f[:-3]}", os.path.join(REPO, "tests", "sampling", f))
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            for n in names:
                out.update({f"{f} {n} {k}": v for k, v in getattr(mod, n).items()})
        except Exception as e:  # noqa: BLE001 - the tests' configurations are a bonus
            print(f"  (tests/sampling/{f} not read: {type(e).__name__}: {e})", file=sys.stderr)
    return out


def wl_sampler(dry_all: bool):
    import torch

    from mtp_turbo.sampling import fused
    from mtp_turbo.sampling.config import SamplerConfig

    def run(V, cases, rows, debug_too, entry_rows=True):
        g = torch.Generator().manual_seed(0)
        for c in cases.values():
            if not isinstance(c, SamplerConfig):
                c = SamplerConfig(**{**CHAIN, **c})
            for r in rows:
                logits = torch.randn(r, V, generator=g) * 2.5
                tok = torch.randint(0, V, (3000,), generator=g)
                pos = torch.arange(2980, 2980 + r)
                for dbg in ((False, True) if debug_too else (False,)):
                    fused.sample_tokens(logits, tok, pos, c, backend="triton", return_logits=dbg)
                if entry_rows:
                    win = torch.randint(0, V, (r, 24), generator=g)
                    win[:, :3] = -1
                    u = torch.rand(r, generator=g, dtype=torch.float64)
                    fused.sample_rows(logits, win, u, c, backend="triton")

    more = _sampler_configs()
    with workload("sampler V=5000 rows 1,8", dry=dry_all):
        run(5000, SAMPLER_CPU, (1, 8), False)
    with workload(f"sampler V=5000, {len(more)} more configurations", dry=True):
        run(5000, more, (1,), False)
    with workload(f"sampler V=262144 rows 1,8 (+return_logits), {len(SAMPLER_CPU) + len(more)} configurations",
                  dry=True):
        run(262144, {**SAMPLER_CPU, **more}, (1, 8), True)
    with workload("sampler V=262144 rows 16 (the GPU tests' batch)", dry=True):
        run(262144, {"chain": {}, "top-k 200": dict(top_k=200)}, (16,), False, False)


def wl_gemv(dry_all: bool):
    import numpy as np
    import torch

    from mtp_turbo.quant import kernels as qk
    from mtp_turbo.quant.gemv import default_tile
    from mtp_turbo.quant.repack import BLOCK_BYTES, BLOCK_FORMATS, PackedWeight

    # one matrix per shape class and K (the GEMV's runtime ints: chunks per split == 1 or not, ...):
    # the 270M drafter's qkv, o, gate|up, down, fc; the head class (the real LM head has 262144 or
    # 32768 rows; 32768 specialises alike); "large" at its threshold (4096 x 4096)
    shapes = {"qkv 1536x640": (1536, 640), "o 640x1024": (640, 1024), "gate_up 4096x640": (4096, 640),
              "down 640x2048": (640, 2048), "fc 640x1280": (640, 1280), "k 256x640": (256, 640),
              "head 32768x640": (32768, 640), "large 4096x4096": (4096, 4096)}
    for fmt in BLOCK_FORMATS:
        with workload(f"gemv {fmt} (CUDA branch; H200 and pre-Hopper tiles)", dry=True), gemv_cuda_branch():
            for label, (n, k) in shapes.items():
                nb = k // 32
                raw = np.zeros(n * nb * BLOCK_BYTES[fmt], dtype=np.uint8)  # zero scales: valid, cheap
                w = PackedWeight.from_gguf_bytes(raw, fmt, (n, k))
                for cap in (None, (8, 0)):  # None: the H200 (as measured); (8, 0): before Hopper
                    for m in (1, 2, 3, 4):
                        tile = default_tile(n, k, m, fmt, cap)
                        for dt in (torch.float32, torch.bfloat16):
                            x = torch.zeros(m, k, dtype=dt)
                            out = torch.empty(m, n, dtype=torch.float32)
                            qk.gemv_packed(x, w, tile, out)
                w.derived.clear()


def wl_gemv_tiles(dry_all: bool):
    """Opt-in: every SUPPORTED_TILES entry (what an A/B --draft-tile or gemv_bench.py may pick) on a
    270M-drafter-sized matrix, 1 and 4 rows, bf16 x."""
    import numpy as np
    import torch

    from mtp_turbo.quant import kernels as qk
    from mtp_turbo.quant.gemv import SUPPORTED_TILES
    from mtp_turbo.quant.repack import BLOCK_BYTES, BLOCK_FORMATS, PackedWeight

    for fmt in BLOCK_FORMATS:
        with workload(f"gemv_tiles {fmt}: {len(SUPPORTED_TILES)} tiles", dry=True), gemv_cuda_branch():
            for n, k in ((2048, 640), (640, 2048)):
                w = PackedWeight.from_gguf_bytes(np.zeros(n * (k // 32) * BLOCK_BYTES[fmt], dtype=np.uint8), fmt,
                                                 (n, k))
                for tile in SUPPORTED_TILES:
                    for m in (1, 4):
                        qk.gemv_packed(torch.zeros(m, k, dtype=torch.bfloat16), w, tile,
                                       torch.empty(m, n, dtype=torch.float32))


def wl_fragk(dry_all: bool):
    """The frag8 GEMV on K-quant layouts (fragk.py): Q4_K and Q6_K at Gemma-3 4B's matrix shapes and a
    head's, 1-4 rows, the tiles the fused step uses (frag8 / frag8x, split 1 / 8 / 16), bf16 x; dry."""
    import torch
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as GT

    from mtp_turbo.quant.gemv import TileConfig
    from mtp_turbo.quant.kernels import frag8_gemv, frag_gemm
    from mtp_turbo.quant.kernels.frag8 import Frag8Weight
    from mtp_turbo.quant.kernels.fragk import FragKWeight
    from mtp_turbo.quant.repack import BLOCK_BYTES, PackedWeight

    view = _cuda_view_type()
    shapes = {"qkv 4096x2560": (4096, 2560), "o 2560x2048": (2560, 2048), "down 2560x10240": (2560, 10240),
              "head 32768x2560": (32768, 2560)}
    for t in (GT.Q4_K, GT.Q6_K):
        with workload(f"fragk {t.name} (CUDA branch)", dry=True):
            for label, (n, k) in shapes.items():
                block, size = GGML_QUANT_SIZES[t]
                fw = FragKWeight.from_gguf(torch.zeros(n * k // block * size, dtype=torch.uint8), t, (n, k))
                for kernel, split in (("frag8", 1), ("frag8", 8), ("frag8x", 16), ("frag8", 16)):
                    for m in (1, 2, 3, 4):
                        REC.dry += 1
                        try:
                            frag8_gemv.launch(torch.zeros(m, k, dtype=torch.bfloat16).as_subclass(view), fw,
                                              TileConfig(kernel, 32, 64, 4, 2, split),
                                              torch.empty(m, n, dtype=torch.float32))
                        finally:
                            REC.dry -= 1
                REC.dry += 1
                try:  # the prefill GEMM (frag_gemm.py), a 128-row chunk, split 1 and 8
                    for split in (1, 8):
                        frag_gemm.launch(torch.zeros(128, k, dtype=torch.bfloat16), fw, split,
                                         torch.empty(128, n, dtype=torch.float32))
                finally:
                    REC.dry -= 1
    # a whole step and a prefill chunk of a mixed-format model on the frag layouts (their epilogue kernels:
    # q/k RoPE on float32 rows, the norm after a float32 GEMV, gated_act)
    import importlib.util
    import tempfile

    from mtp_turbo.cache.kv import KVCache
    from mtp_turbo.io.gguf_file import GGUFFile
    from mtp_turbo.models.fused import FusedDecoder
    from mtp_turbo.models.load import load_model

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec_ = importlib.util.spec_from_file_location("tfw", os.path.join(here, "tests", "models", "test_file_weights.py"))
    tfw = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(tfw)
    for tied in (False, True):
        with tempfile.TemporaryDirectory() as d, workload(f"a mixed-format model's step on the frag layouts "
                                                          f"({'tied' if tied else 'untied'})", dry=True):
            m = load_model(GGUFFile(tfw.write_model(tfw.Path(d) / "mixed.gguf", tied=tied)), "cpu", torch.bfloat16,
                           progress=False, file_weights=True, frag=True)
            kv = KVCache(2, 256, tfw.KV_HEADS, tfw.HEAD_DIM, "cpu", torch.bfloat16)
            dec = FusedDecoder(m, kv)
            for T_ in (1, 4, 32):
                dec.forward(torch.zeros(T_, dtype=torch.int64), torch.arange(T_), head=T_ <= 8)
    for fmt in ("q8_0", "q5_0", "q4_0"):
        with workload(f"frag_gemm {fmt}", dry=True):
            n, k = 2048, 640
            raw = torch.zeros(n * k // 32 * BLOCK_BYTES[fmt], dtype=torch.uint8)
            fw = Frag8Weight.from_packed(PackedWeight.from_gguf_bytes(raw, fmt, (n, k)))
            REC.dry += 1
            try:
                frag_gemm.launch(torch.zeros(128, k, dtype=torch.bfloat16), fw, 4, torch.empty(128, n, dtype=torch.float32))
            finally:
                REC.dry -= 1


def wl_glue(dry_all: bool) -> None:
    import math

    import torch

    from mtp_turbo.models.embed import scaled_embedding
    from mtp_turbo.models.greedy import GreedyPick
    from mtp_turbo.spec.glue import RoundGlue

    g = torch.Generator().manual_seed(0)
    glue = RoundGlue("triton")
    C = 4096 + 16  # the engine's token buffer at the default context
    i64 = dict(dtype=torch.int64)

    with workload("glue: a round's inputs and acceptance, k = 0..7, exact and greedy", dry=dry_all):
        ar = torch.arange(9)
        rows, toks, pos = (torch.zeros(9, **i64) for _ in range(3))
        out = torch.zeros(10, **i64)
        for k in range(8):
            for greedy in (False, True):
                tb, n = torch.randint(0, 50, (C,), generator=g), torch.tensor([100])
                d = torch.randint(0, 50, (max(k, 1),), generator=g)  # (a drafter's slots, the n-gram's
                glue.round_inputs(tb, n, d[:k] if k else None, k, ar, rows, toks, pos)  # output, drafts_dev)
                t = torch.randint(0, 50, (k + 1,), generator=g)
                glue.accept(tb, n, t, t.flip(0) if greedy else None, k, ar, toks, pos, out)
                # with the verified rows' hidden states copied into the MTP drafter's rows (bf16, D 640)
                hid = (torch.zeros(k + 1, 640, dtype=torch.bfloat16), torch.zeros(C, 640, dtype=torch.bfloat16),
                       rows[: k + 1])
                glue.accept(tb, n, t, t.flip(0) if greedy else None, k, ar, toks, pos, out, hid)
    with workload("glue: plain steps, programs of 2, 4, 8", dry=dry_all):
        for steps in (2, 4, 8):
            tb, n = torch.randint(0, 50, (C,), generator=g), torch.tensor([100])
            glue.round_inputs(tb, n, None, 0, ar, rows, toks, pos)
            for j in range(steps):
                glue.step_commit(tb, n, torch.randint(0, 50, (1,), generator=g), j, steps, out, toks, rows, pos)
    with workload("glue: a round staged ahead (after_inputs), rows 2..8, chains 1..7, windows", dry=dry_all):
        V = 262144
        vmap = torch.randint(-1, 32768, (V,), generator=g)
        tb = torch.randint(0, V, (C,), generator=g)
        for R in range(2, 9):
            for k in range(1, 8):
                staged = torch.cat([torch.arange(200, 200 + R), torch.randint(0, 300, (R * k * 6,), generator=g)])
                for w in (None, 3, 64, 4096):
                    seq = torch.zeros((w or 0) + 8, **i64)
                    win = None if w is None else (vmap, seq, w, torch.arange(-w, 0))
                    glue.after_inputs(staged, R, k, torch.tensor([R - 1]), tb, torch.tensor([3000]), win)
    with workload("glue: draft 0's row (after_select) at the 270M drafter's shapes", dry=dry_all):
        for xdt in (torch.float32, torch.bfloat16):  # a packed fc's output is fp32, a dense one's bf16
            for R in (2, 4, 8):
                x, q = torch.randn(R, 640).to(xdt), torch.randn(R, 4, 256).to(torch.bfloat16)
                glue.after_select(torch.tensor([1]), x, q)
    with workload("glue: draft slots (draft_store), every alignment, id map and window", dry=dry_all):
        ids = torch.randint(0, 262144, (32768,), generator=g)
        slots, seq = torch.zeros(8, **i64), torch.zeros(64 + 8, **i64)
        for j in range(2):
            for mapped in (None, ids):
                for window in (False, True):
                    at = seq[64 + j: 65 + j] if window else None
                    glue.draft_store(torch.tensor([j]), mapped, slots[j: j + 1], at)
    with workload("embed_rows: the 270M embedding, bf16 rows 1..8 and 128; fp32", dry=True):
        for dt in (torch.bfloat16, torch.float32):
            emb = torch.empty(262144, 640, dtype=dt)
            scale = torch.tensor(math.sqrt(640), dtype=dt)
            res = torch.empty(128, 640, dtype=dt)
            for T in (1, 2, 3, 4, 5, 8, 128):
                scaled_embedding(emb, scale, torch.zeros(T, **i64), res[:T])
    with workload("argmax_rows: mapped into a draft slot, 32768 / 262144 logits", dry=True):
        pick = GreedyPick("triton")
        slots = torch.zeros(8, **i64)
        for V in (32768, 262144):
            ids = torch.zeros(V, **i64)
            for j in range(2):
                pick(torch.zeros(1, V), out=slots[j: j + 1], ids=ids)
                pick(torch.zeros(1, V), out=slots[j: j + 1])


def wl_ngram(dry_all: bool) -> None:
    import torch

    from mtp_turbo.spec.drafters.ngram import NGramDrafter

    g = torch.Generator().manual_seed(0)
    for C, dry in ((2048 + 16, dry_all), (4096 + 16, True), (131072 + 16, True)):
        with workload(f"ngram lookup, buffer of {C}", dry=dry):
            tok = torch.randint(0, 5, (C,), generator=g)
            n = torch.tensor([C // 2])
            for nmin, nmax in ((1, 4), (2, 4), (1, 16)):
                dr = NGramDrafter(nmin, nmax, kernels="triton")
                for k in range(1, 8):
                    dr.lookup(tok, n, k)


def wl_planes(dry_all: bool) -> None:  # noqa: C901
    """The fused GEMVs on the file's own bytes (quant/planes.py): every format at the default tiles of
    each matrix class, a two-segment q|k|v and a gated gate|up, 1 and 4 rows, bf16 (dry)."""
    import sys as _sys

    import torch
    from gguf import GGMLQuantizationType as T

    _sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "quant"))
    from blocks import FORMATS, random_blocks

    from mtp_turbo.models.arch import BlockSpec
    from mtp_turbo.models.layer_plan import FusedTiles, LayerPlan
    from mtp_turbo.quant.planes import FusedWeight, PlaneMatrix

    def pm(t, n, k):
        return PlaneMatrix.from_gguf(torch.from_numpy(random_blocks(t, n, k, 0)), t, (n, k))

    spec = BlockSpec(hidden=2560, n_heads=8, n_kv_heads=4, head_dim=256, ffn=10240, eps=1e-6, query_scale=0.1,
                     qk_norm=True, sandwich_norms=True, activation="gelu_tanh", qkv_bias=False)
    plan = LayerPlan(spec, FusedTiles(tails=False), torch.bfloat16, torch.device("cpu"))
    with workload("plane GEMVs", dry=True):
        for t in FORMATS:
            for n, k, gated in ((512, 2560, False), (512, 10240, False), (1024, 2560, True)):
                w = FusedWeight(pm(t, n, k))
                for rows in (1, 4):
                    x = torch.zeros(rows, k, dtype=torch.bfloat16)
                    plan.gemv(x, w, torch.zeros(16, n // 2 if gated else n, dtype=torch.bfloat16), gated=gated)
        w = FusedWeight(pm(T.Q4_K, 512, 2560), pm(T.Q6_K, 256, 2560))
        plan.gemv(torch.zeros(1, 2560, dtype=torch.bfloat16), w, torch.zeros(16, 768, dtype=torch.bfloat16))
    # a whole step (tails: linear_rope / linear_norm) and a prefill chunk over a model mixing every format
    import importlib.util
    import tempfile

    from mtp_turbo.cache.kv import KVCache
    from mtp_turbo.io.gguf_file import GGUFFile
    from mtp_turbo.models.fused import FusedDecoder
    from mtp_turbo.models.load import load_model

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec_ = importlib.util.spec_from_file_location("tfw", os.path.join(here, "tests", "models", "test_file_weights.py"))
    tfw = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(tfw)
    with tempfile.TemporaryDirectory() as d, workload("a mixed-format model's step on the file's bytes", dry=True):
        m = load_model(GGUFFile(tfw.write_model(tfw.Path(d) / "mixed.gguf")), "cpu", torch.bfloat16, progress=False,
                       file_weights=True)
        kv = KVCache(2, 256, tfw.KV_HEADS, tfw.HEAD_DIM, "cpu", torch.bfloat16)
        dec = FusedDecoder(m, kv)
        for T_ in (1, 4, 32):
            dec.forward(torch.zeros(T_, dtype=torch.int64), torch.arange(T_), head=T_ <= 8)


WORKLOADS = {"main": wl_main, "mtp": wl_mtp, "sampler": wl_sampler, "gemv": wl_gemv, "glue": wl_glue,
             "ngram": wl_ngram, "gemv_tiles": wl_gemv_tiles,
             "planes": wl_planes, "fragk": wl_fragk}
DEFAULT_WORKLOADS = ("main", "mtp", "sampler", "gemv", "glue", "ngram")


def record(names: list[str], dry_all: bool) -> dict:
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("record needs TRITON_INTERPRET=1 before triton is imported")
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton

    torch.set_num_threads(min(2, torch.get_num_threads()))
    install_recorder()
    t0 = time.time()
    with torch.inference_mode():
        for n in names:
            WORKLOADS[n](dry_all)
    return {"triton_record": triton.__version__, "torch": torch.__version__, "workloads": names,
            "record_s": round(time.time() - t0, 1), "workload_errors": REC.errors, "launches": REC.dump()}


# ============================================================================ step 2: compile

def _rebuild(desc):
    """A recorded argument as the other Triton's launcher will see it."""
    import torch

    t = desc["t"]
    if t == "tensor":
        from triton.runtime.jit import MockTensor

        class Ptr(MockTensor):
            def __init__(self, dtype, ptr):
                super().__init__(dtype)
                self.ptr = ptr

            def data_ptr(self):
                return self.ptr

        return Ptr(getattr(torch, desc["dtype"]), 4096 + desc["mod16"])
    if t in ("int", "float", "bool", "str"):
        return desc["v"]
    if t == "none":
        return None
    if t == "tuple":
        return tuple(_rebuild(x) for x in desc["v"])
    if t == "tldtype":
        import triton.language as tl

        return getattr(tl, desc["v"])
    raise TypeError(f"cannot rebuild argument {desc}")


def _ptxas_info(log: str) -> dict:
    info = {}
    m = re.search(r"Used (\d+) registers", log)
    if m:
        info["registers"] = int(m.group(1))
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if m:
        info["spill_stores"], info["spill_loads"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"(\d+) bytes stack frame", log)
    if m:
        info["stack"] = int(m.group(1))
    return info


def _restore_fd2(saved: int, f) -> str:
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)
    f.seek(0)
    text = f.read().decode(errors="replace")
    f.close()
    return text


def _diagnostics(text: str) -> str:
    """The compiler's messages without the IR it dumps on a failed pass (kept: the error and note
    lines, the source lines they quote, the failing pass)."""
    keep, in_ir = [], False
    for ln in text.splitlines():
        if ln.startswith("module {") or ln.startswith("{-#"):
            in_ir = True
        elif in_ir and (ln.startswith("}") or ln.startswith("#-}")):
            in_ir = False
            continue
        if not in_ir and ln.strip():
            keep.append(ln)
    out = "\n".join(keep)
    return out[:5000]


def compile_one(rec: dict) -> dict:
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    mod, name = rec["kernel"].split(":")
    try:
        fn = getattr(importlib.import_module(mod), name)
    except Exception as e:  # noqa: BLE001
        return {"status": "FAIL", "stage": "import", "error": f"{type(e).__name__}: {e}"}
    target = GPUTarget(*TARGET)
    backend = make_backend(target)
    names = [p.name for p in fn.params]
    if names != [p["name"] for p in rec["params"]]:
        return {"status": "FAIL", "stage": "signature",
                "error": f"parameters changed since recording: {names} vs {[p['name'] for p in rec['params']]}"}
    args = [_rebuild(p["arg"]) for p in rec["params"]]
    kwargs = dict(rec["options"])
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    t0 = time.time()
    log = io.StringIO()
    diag = tempfile.TemporaryFile(mode="w+b")  # MLIR diagnostics go to file descriptor 2
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(diag.fileno(), 2)
    try:
        binder = create_function_from_signature(fn.signature, fn.params, backend)
        bound, spec, opts = binder(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, opts)
        src_cls = ASTSource
        if getattr(fn, "is_gluon", lambda: False)():
            from triton.experimental.gluon._runtime import GluonASTSource as src_cls
        src = src_cls(fn, signature, constexprs, attrs)
        with contextlib.redirect_stdout(log):  # knobs.nvidia.dump_ptxas_log prints ptxas -v here
            k = triton.compile(src, target=target, options=options.__dict__)
    except Exception as e:  # noqa: BLE001
        msg = f"{type(e).__name__}: {e}"
        cause = e.__cause__
        while cause is not None:  # a CompilationError's own text names the outer call only
            msg = f"{type(cause).__name__}: {cause}\n(inside) {msg}"
            cause = cause.__cause__
        if "PTXASError" in type(e).__name__:
            msg = msg.split("\n\n")[0][:4000]
        d = _diagnostics(_restore_fd2(saved, diag))
        if d:
            msg = f"{msg}\n{d}"
        return {"status": "FAIL", "stage": "compile", "error": msg[:8000], "seconds": round(time.time() - t0, 2)}
    _restore_fd2(saved, diag)
    out = {"status": "OK", "seconds": round(time.time() - t0, 2), "shared": k.metadata.shared,
           "num_warps": k.metadata.num_warps, "num_stages": k.metadata.num_stages,
           "signature": {n: v for n, v in signature.items() if v != "constexpr"}}
    out.update(_ptxas_info(log.getvalue()))
    out["ptxas"] = [ln.strip() for ln in log.getvalue().splitlines() if "ptxas info" in ln or "bytes stack" in ln][:12]
    # compiled, but the launcher would refuse to load it on the device
    if out["shared"] > MAX_SHARED:
        out.update(status="FAIL", stage="load", error=f"OutOfResources: out of resource: shared memory, Required: "
                   f"{out['shared']}, Hardware limit: {MAX_SHARED} (sm_90 opt-in maximum)")
    elif out.get("registers", 0) * 32 * out["num_warps"] > MAX_REGS_PER_BLOCK:
        out.update(status="FAIL", stage="load", error=f"OutOfResources: {out['registers']} registers x "
                   f"{32 * out['num_warps']} threads > {MAX_REGS_PER_BLOCK}")
    return out


def worker(path: str, results: str, start: int, only: str | None, src: str) -> int:
    """Compile the launches of `path` from index `start`, one JSON line per launch into `results`
    (a "begin" line first, so the parent can tell which one hung or crashed); the kernels' modules
    imported from the source tree `src`."""
    sys.path.insert(0, src)
    import torch

    # models/triton_env.py imports Triton only where its kernels can run (CUDA or the interpreter);
    # here they are compiled for a GPU this machine does not have
    torch.cuda.is_available = lambda: True
    import triton
    from triton import knobs

    knobs.nvidia.dump_ptxas_log = True
    knobs.compilation.always_compile = True
    with open(path) as f:
        data = json.load(f)
    recs = data["launches"]
    with open(results, "a") as out:
        if start == 0:
            out.write(json.dumps({"triton_compile": triton.__version__, "triton_path": triton.__file__,
                                  "src": src}) + "\n")
        for i in range(start, len(recs)):
            if only and only not in recs[i]["kernel"]:
                continue
            out.write(json.dumps({"i": i, "begin": True}) + "\n")
            out.flush()
            res = compile_one(recs[i])
            out.write(json.dumps({"i": i, "result": res}) + "\n")
            out.flush()
    return 0


def compile_all(data: dict, triton_dir: str, timeout: float, only: str | None, src: str = REPO) -> dict:
    """Run the worker under the other Triton; restart it after a hang or crash."""
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = os.pathsep.join([triton_dir, src] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    tmp = tempfile.mkdtemp(prefix="offline_compile_")
    env["TRITON_CACHE_DIR"] = os.path.join(tmp, "cache")
    inp, res = os.path.join(tmp, "launches.json"), os.path.join(tmp, "results.jsonl")
    with open(inp, "w") as f:
        json.dump(data, f)
    n = len(data["launches"])
    results: dict[int, dict] = {}
    version = None
    start, seen = 0, 0  # seen: lines of the results file read (it grows across worker restarts)
    while start < n:
        log = open(os.path.join(tmp, f"worker_{start}.log"), "w")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", inp, "--results", res, "--start", str(start),
               "--src", src]
        if only:
            cmd += ["--only", only]
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        begun, t_begin = None, time.time()
        n_before = len(results)
        while True:
            rc = p.poll()
            with open(res) if os.path.exists(res) else io.StringIO() as f:
                lines = f.read().splitlines()
            for ln in lines[seen:]:
                try:
                    obj = json.loads(ln)
                except json.JSONDecodeError:
                    break
                seen += 1
                if "triton_compile" in obj:
                    version = obj
                elif obj.get("begin"):
                    begun, t_begin = obj["i"], time.time()
                    if sys.stderr.isatty():
                        print(f"  compiling {obj['i'] + 1}/{n} {data['launches'][obj['i']]['kernel'].split(':')[1]}"
                              "        ", file=sys.stderr, end="\r")
                else:
                    results[obj["i"]] = obj["result"]
                    begun = None
            if rc is not None:
                break
            if begun is not None and time.time() - t_begin > timeout:
                p.kill()
                p.wait()
                results[begun] = {"status": "FAIL", "stage": "timeout", "error": f"no result after {timeout:.0f} s"}
                break
            time.sleep(0.3)
        log.close()
        if begun is not None and begun not in results:  # the worker died on it
            with open(log.name) as f:
                tail = f.read()[-3000:]
            results[begun] = {"status": "FAIL", "stage": "crash", "error": f"worker exit {p.returncode}: {tail}"}
        if p.returncode == 0 and begun is None:
            break
        if len(results) == n_before:  # no progress: the worker cannot start
            with open(log.name) as f:
                raise RuntimeError(f"compile worker failed (exit {p.returncode}):\n{f.read()[-3000:]}")
        start = max(results) + 1
    import shutil

    shutil.rmtree(env["TRITON_CACHE_DIR"], ignore_errors=True)  # the compiled kernels; the worker logs stay
    print(f"compile worker logs (the compiler's full output): {tmp}", file=sys.stderr)
    for i, rec in enumerate(data["launches"]):
        if only and only not in rec["kernel"]:
            continue
        rec["compile"] = results.get(i, {"status": "FAIL", "stage": "missing", "error": "no result"})
    data["triton_compile"] = version
    data["target"] = list(TARGET)
    return data


# ============================================================================ report

_SHOW = {  # the constexprs / options that name a variant in the table (others are in the JSON)
    "linear": ("PRO", "GATED", "KP", "BN", "BK", "PREC"), "residual_norm": ("PRO", "KP"),
    "qk_rope_write": ("H", "HKV", "DH"), "attn_partial": ("DH", "QR", "BS", "PREC"),
    "attn_combine": ("DH", "QR", "BS"), "mtp_inputs": ("KP",), "attn_cells": ("DH", "QR", "BS", "PREC"),
    "gated_act": ("BN", "SILU"),
    "full_pass": ("KIND", "AT", "AT_CODE", "PREV_KIND", "NEED_C", "COUNT_MODE", "WS", "DEBUG", "B"),
    "compact": ("FIRST", "FROM_CAND", "GREEDY", "NEED_C", "COUNT_MODE", "WS", "DEBUG", "NCP", "KP"),
    "count_table": ("END_FROM_POS", "BLK"),
    "gemv_dot": ("M", "BLOCK_N", "BLOCK_K", "FMT", "F32_OPERANDS"), "x_wide": ("M", "MP"),
    "gemv_i8w": ("M", "MP", "BLOCK_N", "F32_OPERANDS"), "x_pair": ("M", "MP", "OFF"),
    "gemv_i8w_pairs": ("M", "MP", "BLOCK_N", "HAS_QH", "F32_OPERANDS", "ASM"),
    "x_frag8": ("M", "MM", "SHIFT", "PDL"), "gemv_frag8": ("FMT", "W", "MM", "FUSE", "AHEAD", "XIN"),
    "ngram_lookup": ("K", "NMIN", "NMAX", "NBP", "KP"),
}


def label(rec: dict) -> str:
    name = rec["kernel"].split(":")[1]
    ce = {p["name"]: p["arg"].get("v") for p in rec["params"] if p["constexpr"]}
    keys = _SHOW.get(name, tuple(ce)[:6])
    parts = [f"{k}={ce[k]}" for k in keys if k in ce]
    dts = sorted({p["arg"]["dtype"] for p in rec["params"] if p["arg"]["t"] == "tensor"} - {"int64", "int32"})
    one = [p["name"] for p in rec["params"] if not p["constexpr"] and not p["dns"] and p["arg"]["t"] == "int"
           and p["arg"]["v"] == 1]
    s = f"{name} {' '.join(parts)} [{','.join(dts)}]"
    if one:
        s += f" {','.join(one)}=1"
    return s


def report(data: dict, out: str | None) -> int:
    recs = data["launches"]
    if out:
        with open(out, "w") as f:
            json.dump(data, f, indent=1)
    rows = [r for r in recs if "compile" in r]
    fails = [r for r in rows if r["compile"]["status"] != "OK"]
    print(f"\nrecorded with triton {data.get('triton_record')}, compiled with triton "
          f"{(data.get('triton_compile') or {}).get('triton_compile')} for {data.get('target')}: "
          f"{len(rows)} distinct launches, {len(rows) - len(fails)} OK, {len(fails)} FAIL")
    for e in data.get("workload_errors", []):
        print(f"workload error: {e['workload']}: {e['error']}")
    print(f"\n{'id':5} {'result':6} {'regs':>4} {'spill':>5} {'smem':>6} {'w/s':>4}  kernel (constexprs) [dtypes]")
    for r in rows:
        c = r["compile"]
        o = r["options"]
        ws = f"{o.get('num_warps', 4)}/{o.get('num_stages', 3)}"
        if c["status"] == "OK":
            spill = c.get("spill_stores", 0) + c.get("spill_loads", 0)
            print(f"{r['id']:5} {'OK':6} {c.get('registers', '?'):>4} {spill:>5} {c['shared']:>6} {ws:>4}  {label(r)}")
        else:
            lines = [ln for ln in c["error"].strip().splitlines() if ln.strip()]
            msg = next((ln for ln in lines if "error:" in ln), lines[0] if lines else "")
            msg = re.sub(r"^\S*/mtp_turbo/", "", msg)[:200]
            print(f"{r['id']:5} {'FAIL':6} {'':>4} {'':>5} {'':>6} {ws:>4}  {label(r)}\n{'':12}{c['stage']}: {msg}")
    # the short table: per kernel
    print(f"\n{'kernel':44} {'variants':>8} {'OK':>4} {'FAIL':>5} {'max regs':>8} {'spills':>6} {'max smem':>8}")
    kern: dict[str, list] = {}
    for r in rows:
        kern.setdefault(r["kernel"], []).append(r)
    for k, rs in kern.items():
        ok = [r["compile"] for r in rs if r["compile"]["status"] == "OK"]
        regs = max((c.get("registers", 0) for c in ok), default=0)
        sp = sum(1 for c in ok if c.get("spill_stores", 0) + c.get("spill_loads", 0))
        sm = max((c["shared"] for c in ok), default=0)
        short = k.replace("mtp_turbo.", "")
        print(f"{short:44} {len(rs):>8} {len(ok):>4} {len(rs) - len(ok):>5} {regs:>8} {sp:>6} {sm:>8}")
    if fails:
        print("\nFAIL messages (first lines; the full text is in --out):")
        seen = set()
        for r in fails:
            c = r["compile"]
            key = (r["kernel"], c["error"][:300])
            if key in seen:
                continue
            seen.add(key)
            n = sum(1 for q in fails if q["kernel"] == r["kernel"] and q["compile"]["error"][:300] == c["error"][:300])
            print(f"- {r['id']} {label(r)} ({n} variant{'s' if n > 1 else ''}): {c['stage']}:")
            for ln in c["error"].strip().splitlines()[:14]:
                print(f"    {ln[:200]}")
    return 1 if fails else 0


# ============================================================================ main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the full JSON log here")
    ap.add_argument("--record-only", metavar="FILE", help="record the launches into FILE and stop")
    ap.add_argument("--compile-only", metavar="FILE", help="compile the launches recorded in FILE")
    ap.add_argument("--triton", default="/tmp/t36", help="directory holding the Triton to compile with")
    ap.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                    help=f"comma-separated, of {','.join(WORKLOADS)} (default {','.join(DEFAULT_WORKLOADS)})")
    ap.add_argument("--dry", action="store_true", help="record every launch without executing any")
    ap.add_argument("--only", help="compile only launches whose kernel name contains this")
    ap.add_argument("--timeout", type=float, default=600, help="seconds one compile may take")
    ap.add_argument("--src", default=REPO, help="source tree the compile step imports the kernels from "
                    "(default: this repository; a patched copy to try a fix)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--results", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.results, args.start, args.only, os.path.abspath(args.src))
    if args.compile_only:
        with open(args.compile_only) as f:
            data = json.load(f)
    else:
        names = [n for n in args.workloads.split(",") if n]
        bad = [n for n in names if n not in WORKLOADS]
        if bad:
            ap.error(f"unknown workloads {bad}; choose from {list(WORKLOADS)}")
        print(f"recording {names} in the interpreter", file=sys.stderr)
        data = record(names, args.dry)
        print(f"recorded {len(data['launches'])} distinct launches in {data['record_s']} s", file=sys.stderr)
        if args.record_only:
            with open(args.record_only, "w") as f:
                json.dump(data, f, indent=1)
            return 0
    if not os.path.isdir(os.path.join(args.triton, "triton")):
        ap.error(f"--triton {args.triton}: no triton package there (see the module docstring to install 3.6)")
    data = compile_all(data, args.triton, args.timeout, args.only, os.path.abspath(args.src))
    return report(data, args.out)


if __name__ == "__main__":
    sys.exit(main())
