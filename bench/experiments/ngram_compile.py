"""Offline compile of the n-gram drafter's lookup kernel (spec/drafters/ngram.py) for sm_90 under another Triton.

Why: bench/offline_compile.py compiles every launch of its workloads, which do not include this
kernel yet; this adds one workload ("ngram") to that script's recorder and runs its record +
compile steps, nothing else. The launches: the buffers of the tests (ctx 2048), the engine's
default ctx 4096 and a 131072-token context (129 programs merged), k = 1..7, ngram_max 4 (the
default) and 16 (the largest SpecConfig allows), ngram_min 1 and 2. The kernel has no integer
arguments: every variant is its constexprs.

    python bench/experiments/ngram_compile.py [--triton /tmp/t36] [--out /tmp/oc_ngram.json]
Exit status 1 when a launch fails to compile.
"""

from __future__ import annotations

import importlib.util
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # the recorder runs the interpreter (before triton imports)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)


def wl_ngram(dry_all: bool) -> None:
    import torch

    from mtp_turbo.spec.drafters.ngram import NGramDrafter

    g = torch.Generator().manual_seed(0)
    for C, dry in ((2048 + 16, dry_all), (4096 + 16, True), (131072 + 16, True)):
        with OC.workload(f"ngram lookup, buffer of {C}", dry=dry):
            tok = torch.randint(0, 5, (C,), generator=g)
            n = torch.tensor([C // 2])
            for nmin, nmax in ((1, 4), (2, 4), (1, 16)):
                dr = NGramDrafter(nmin, nmax, kernels="triton")
                for k in range(1, 8):
                    dr.lookup(tok, n, k)


def main() -> int:
    argv = sys.argv[1:]
    return OC.main(["--workloads", "ngram", *argv])


spec = importlib.util.spec_from_file_location("offline_compile", os.path.join(REPO, "bench", "offline_compile.py"))
OC = importlib.util.module_from_spec(spec)
spec.loader.exec_module(OC)
OC.WORKLOADS["ngram"] = wl_ngram

if __name__ == "__main__":
    sys.exit(main())
