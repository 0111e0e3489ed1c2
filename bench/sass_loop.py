"""Instructions per loop iteration of a GEMV kernel, compiled for sm_90a on a machine without a GPU.

Why: the device time is short; a change to a kernel's loop (masks, load order, conversion code) can
be weighed first by what the compiler makes of it. Compiles one `@triton.jit` kernel of
`mtp_turbo.quant.kernels` with Triton's own `ptxas` for an H100/H200 target, disassembles it (`nvdisasm`)
and prints the registers, the shared memory and, for each backward branch (a loop), its
instruction count and most frequent opcodes. Counts say nothing about memory behaviour: time is
measured on the GPU (gemv_bench.py).

Use the device's Triton version (3.6), installed beside the project's, e.g.
    pip download --no-deps triton==3.6.0 -d /tmp/w && pip install --no-deps --target /tmp/t36 /tmp/w/*.whl
    PYTHONPATH=/tmp/t36:. python bench/sass_loop.py triton_gemv:gemv_i8w_pairs BLOCK_N=64 MP=1 HAS_QH=0 --stages 2
    PYTHONPATH=/tmp/t36:. python bench/sass_loop.py frag8_gemv:gemv_frag8 FMT=2 W=4 MM=1 FUSE=1 AHEAD=1 XIN=1 SHIFT=4
Integer arguments are compiled as multiples of 16 (as Triton specializes them at launch for
the head and 8192 x 8192); constexprs not given default to M=MP=1, F32_OPERANDS=0, ASM=1.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

_POINTERS = {"XW": "*i8", "XS": "*fp32", "XC": "*i32", "QS": "*u8", "QH": "*i32", "SC": "*fp16",
             "Y": "*fp32", "X": "*fp32", "XF": "*i32", "XE": "*fp32", "QF": "*i32", "HF": "*i32",
             "SF": "*fp16", "OUT": "*fp32", "CNT": "*i32"}
_DEFAULTS = {"M": 1, "MP": 1, "F32_OPERANDS": 0, "ASM": 1}


def loops(sass: str) -> list[tuple[int, collections.Counter]]:
    """(instruction count, opcode counts) of each backward branch's body in nvdisasm output."""
    lines = [ln for ln in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]+\*/", ln)]
    addr = [int(re.match(r"\s+/\*([0-9a-f]+)\*/", ln).group(1), 16) for ln in lines]
    labels = {m.group(1): int(m.group(2), 16) for m in re.finditer(r"\.(L_x_\d+):\n\s+/\*([0-9a-f]+)\*/", sass)}
    out = []
    for i, ln in enumerate(lines):
        m = re.search(r"BRA\s+`\(\.(L_x_\d+)\)", ln)
        if m and labels.get(m.group(1), addr[i]) < addr[i]:
            ops = collections.Counter()
            for a, body in zip(addr, lines):
                if labels[m.group(1)] <= a <= addr[i]:
                    f = body.split()
                    op = f[2] if f[1].startswith("@") else f[1]
                    ops[op.split(".")[0].rstrip(";")] += 1
            out.append((sum(ops.values()), ops))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernel", help="MODULE:FUNCTION under mtp_turbo.quant.kernels, e.g. triton_gemv:gemv_i8w, "
                    "or PATH.py:FUNCTION (an experiment's kernel)")
    ap.add_argument("--ptr", action="append", default=[], help="NAME=TYPE: a pointer argument's type (e.g. SC=*u8)")
    ap.add_argument("constexprs", nargs="*", help="NAME=INT for the kernel's constexpr parameters")
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--stages", type=int, default=3)
    args = ap.parse_args(argv)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    mod, name = args.kernel.split(":")
    if mod.endswith(".py"):
        import importlib.util

        spec = importlib.util.spec_from_file_location("experiment_kernel", mod)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(f"mtp_turbo.quant.kernels.{mod}")
    fn = getattr(module, name)
    pointers = dict(_POINTERS, **dict(p.split("=") for p in args.ptr))
    given = dict(_DEFAULTS, **{k: int(v) for k, v in (c.split("=") for c in args.constexprs)})
    sig, const, attrs = {}, {}, {}
    for i, a in enumerate(fn.arg_names):
        if fn.params[i].is_constexpr:
            if a not in given:
                ap.error(f"constexpr {a} needs a value (NAME=INT)")
            sig[a], const[(i,)] = "constexpr", given[a]
        else:
            sig[a] = pointers.get(a, "i32")
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource
    if type(fn).__name__ == "GluonJITFunction":  # Gluon kernels: the layouts need the module's warp count
        from triton.experimental.gluon._runtime import GluonASTSource as src
    k = triton.compile(src(fn, sig, constexprs=const, attrs=attrs), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=args.warps, num_stages=args.stages))
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.TemporaryDirectory() as d:
        ptx, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(ptx, "w") as f:
            f.write(k.asm["ptx"])
        info = subprocess.run([os.path.join(bindir, "ptxas"), "-arch=sm_90a", "-v", ptx, "-o", cubin],
                              capture_output=True, text=True, check=True).stderr
        sass = subprocess.run([os.path.join(bindir, "nvdisasm"), "-c", cubin], capture_output=True, text=True,
                              check=True).stdout
    regs = re.search(r"Used (\d+) registers", info)
    print(f"{args.kernel} {given} warps={args.warps} stages={args.stages}: "
          f"{regs.group(1) if regs else '?'} registers, {k.metadata.shared} B shared memory")
    for n, ops in loops(sass):
        print(f"  loop: {n} instructions; " + ", ".join(f"{o} {c}" for o, c in ops.most_common(12)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
