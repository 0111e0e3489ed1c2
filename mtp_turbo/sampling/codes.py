"""The codes the fused sampler's planner (fused.py) and its kernels (kernels.py, passes.py) share:
stages, pass kinds, penalty-count modes, the per-row state layout. Plain ints, no imports."""

# codes shared with the kernels (kernels.py reads them): stages, pass kinds, penalty-count modes,
# the per-row state (NSLOT float64 slots, SLOTS per stage position)
PEN, TEMP, MINP, TOPP, TOPK = 1, 2, 3, 4, 5
STATS, RADIX, TIES, SELECT, FINAL = 1, 2, 3, 4, 5
SCAN, TABLE = 1, 2
SLOTS = 32
NSLOT = 6 * SLOTS  # stage positions 0..4 and the final STATS at 5
PART_W = 32  # a pass's partials per chunk: STATS max, sum; RADIX 16 bins, chunk max, mass above
