"""Offline compile of the round's index kernels (spec/glue.py), the input-row embedding kernel
(models/embed.py) and the greedy pick's id map (models/greedy.py) for sm_90 under another Triton.

Why: bench/offline_compile.py compiles every launch of its workloads; its "main" and "mtp"
workloads reach the embedding kernel (every forward), the pick's new arguments and the drafter's
prepare-path chain (draft slots, staged chain positions), but not the round program nor a round
staged ahead. This adds one workload ("glue") to that script's recorder and runs its record +
compile steps. The launches: round_inputs / accept for k = 0..7, both rules; plain steps of 2, 4,
8 (every step index); after_inputs for catch-up rows 2..8, chains 1..7, without a window and with
windows of 3, 64 and 4096 tokens; after_select on the 270M drafter's rows (x fp32 from a packed fc
or bf16 from a dense one, q bf16 [4, 256]); draft_store with and without the id map and the
window, at a draft slot of each alignment; embed_rows on the 270M embedding (bf16, 1..8 and 128
rows; fp32); argmax_rows with the id map into a slot at each alignment, 1 row of 32768 and 262144
logits. Dry where the sizes are real (recorded, not executed).

    python bench/experiments/glue_compile.py [--triton /tmp/t36] [--out /tmp/oc_glue.json]
    python bench/experiments/glue_compile.py --workloads glue,main,mtp --out /tmp/oc.json  # with the others
Exit status 1 when a launch fails to compile.
"""

from __future__ import annotations

import importlib.util
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"  # the recorder runs the interpreter (before triton imports)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)


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

    with OC.workload("glue: a round's inputs and acceptance, k = 0..7, exact and greedy", dry=dry_all):
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
    with OC.workload("glue: plain steps, programs of 2, 4, 8", dry=dry_all):
        for steps in (2, 4, 8):
            tb, n = torch.randint(0, 50, (C,), generator=g), torch.tensor([100])
            glue.round_inputs(tb, n, None, 0, ar, rows, toks, pos)
            for j in range(steps):
                glue.step_commit(tb, n, torch.randint(0, 50, (1,), generator=g), j, steps, out, toks, rows, pos)
    with OC.workload("glue: a round staged ahead (after_inputs), rows 2..8, chains 1..7, windows", dry=dry_all):
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
    with OC.workload("glue: draft 0's row (after_select) at the 270M drafter's shapes", dry=dry_all):
        for xdt in (torch.float32, torch.bfloat16):  # a packed fc's output is fp32, a dense one's bf16
            for R in (2, 4, 8):
                x, q = torch.randn(R, 640).to(xdt), torch.randn(R, 4, 256).to(torch.bfloat16)
                glue.after_select(torch.tensor([1]), x, q)
    with OC.workload("glue: draft slots (draft_store), every alignment, id map and window", dry=dry_all):
        ids = torch.randint(0, 262144, (32768,), generator=g)
        slots, seq = torch.zeros(8, **i64), torch.zeros(64 + 8, **i64)
        for j in range(2):
            for mapped in (None, ids):
                for window in (False, True):
                    at = seq[64 + j: 65 + j] if window else None
                    glue.draft_store(torch.tensor([j]), mapped, slots[j: j + 1], at)
    with OC.workload("embed_rows: the 270M embedding, bf16 rows 1..8 and 128; fp32", dry=True):
        for dt in (torch.bfloat16, torch.float32):
            emb = torch.empty(262144, 640, dtype=dt)
            scale = torch.tensor(math.sqrt(640), dtype=dt)
            res = torch.empty(128, 640, dtype=dt)
            for T in (1, 2, 3, 4, 5, 8, 128):
                scaled_embedding(emb, scale, torch.zeros(T, **i64), res[:T])
    with OC.workload("argmax_rows: mapped into a draft slot, 32768 / 262144 logits", dry=True):
        pick = GreedyPick("triton")
        slots = torch.zeros(8, **i64)
        for V in (32768, 262144):
            ids = torch.zeros(V, **i64)
            for j in range(2):
                pick(torch.zeros(1, V), out=slots[j: j + 1], ids=ids)
                pick(torch.zeros(1, V), out=slots[j: j + 1])


def main() -> int:
    argv = sys.argv[1:]
    if not any(a.startswith("--workloads") for a in argv):
        argv = ["--workloads", "glue", *argv]
    return OC.main(argv)


spec = importlib.util.spec_from_file_location("offline_compile", os.path.join(REPO, "bench", "offline_compile.py"))
OC = importlib.util.module_from_spec(spec)
spec.loader.exec_module(OC)
OC.WORKLOADS["glue"] = wl_glue

if __name__ == "__main__":
    sys.exit(main())
