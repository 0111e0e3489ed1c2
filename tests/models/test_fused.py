"""The fused Triton decode step against the torch forward (decoder.py), on small random models of
every family (Gemma-3's sandwich norms, q/k norms and sliding layers; Llama; Qwen2's biases).

Runs the kernels in Triton's interpreter on the CPU (tests/conftest.py sets TRITON_INTERPRET=1
when CUDA is absent), in fp32, so any indexing, masking, norm, RoPE, windowing or merge mistake
shows as a difference far above fp32 rounding.
"""

import pytest
import torch

pytest.importorskip("triton")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from mtp_turbo.cache.kv import KVCache  # noqa: E402
from mtp_turbo.models import fused  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_models import tiny_model  # noqa: E402

pytestmark = pytest.mark.interpret


def run_both(model, n_prefill, T, capacity=96, tiles=None):
    c = model.cfg
    kv_ref = KVCache(c.n_layers, capacity, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    g = torch.Generator().manual_seed(1)
    toks = torch.randint(0, c.vocab_size, (n_prefill + T,), generator=g)
    model.forward(toks[:n_prefill], 0, kv_ref)
    kv_f = KVCache(c.n_layers, capacity, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    kv_f.k.copy_(kv_ref.k)
    kv_f.v.copy_(kv_ref.v)
    ref_logits, ref_h = model.forward(toks[n_prefill:], n_prefill, kv_ref)
    dec = fused.FusedDecoder(model, kv_f, **({"tiles": tiles} if tiles else {}))
    pos = torch.arange(n_prefill, n_prefill + T)
    logits, hidden = dec.forward(toks[n_prefill:], pos)
    return (ref_logits, ref_h, kv_ref), (logits.clone(), hidden.clone(), kv_f), dec


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


# 4-cell key chunks merged 4 a load: the merge's tiles, aligned to chunk 0, start before a sliding
# window's first chunk and cross tile boundaries (the default tiles take these contexts in one load)
SMALL_CHUNKS = fused.FusedTiles(block_keys=4, combine_chunks=4)
# the default runs the norms and the RoPE in the tails of the GEMVs before them (with these shapes
# the o / down tails wait for 2 programs a row block, each RoPE tail for 2 of the qkv GEMV's 12);
# without tails they are kernels of their own, as in prefill chunks
NO_TAILS = fused.FusedTiles(tails=False)


@pytest.mark.parametrize("n_prefill,T,tiles", [(5, 1, None), (40, 4, None), (63, 8, None),
                                               (40, 4, SMALL_CHUNKS), (63, 1, SMALL_CHUNKS),
                                               (5, 1, NO_TAILS), (40, 8, NO_TAILS)])
def test_fused_matches_torch_forward(n_prefill, T, tiles):
    # 40 and 63 rows of prefill: past the 16-cell sliding window and across key chunks
    model = tiny_model("gemma3")
    (rl, rh, kr), (fl, fh, kf), _ = run_both(model, n_prefill, T, tiles=tiles)
    assert rel(fl, rl) < 1e-4, rel(fl, rl)
    assert rel(fh, rh) < 1e-4
    n = n_prefill + T
    assert rel(kf.k[:, :n], kr.k[:, :n]) < 1e-5 and rel(kf.v[:, :n], kr.v[:, :n]) < 1e-5


def test_fused_gqa_two_kv_groups():
    model = tiny_model(heads=4, kv_heads=2, seed=3)
    (rl, _, _), (fl, _, _), _ = run_both(model, 30, 3)
    assert rel(fl, rl) < 1e-4


# Llama (pre-norm, SwiGLU, no q/k norms) and Qwen2 (QKV biases, an untied head), with GQA ratios
# that leave an attention program fewer rows than a verify (7: Qwen2.5-0.5B's 14 / 2 heads, 4 rows a
# program, so 8 rows take two row blocks) and head sizes of 64 (SmolLM2, Qwen2.5-0.5B)
@pytest.mark.parametrize("family,heads,kv_heads,head_dim,T,tiles", [
    ("llama", 6, 2, 32, 4, None), ("llama", 3, 3, 64, 8, NO_TAILS), ("qwen2", 7, 1, 32, 8, None),
    ("qwen2", 14, 2, 16, 5, NO_TAILS), ("qwen2", 6, 2, 64, 1, None)])
def test_fused_matches_torch_forward_on_every_family(family, heads, kv_heads, head_dim, T, tiles):
    model = tiny_model(family, seed=31, layers=3, heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    (rl, rh, kr), (fl, fh, kf), _ = run_both(model, 40, T, tiles=tiles)
    assert rel(fl, rl) < 1e-4, rel(fl, rl)
    assert rel(fh, rh) < 1e-4
    assert rel(kf.k[:, :40 + T], kr.k[:, :40 + T]) < 1e-5 and rel(kf.v[:, :40 + T], kr.v[:, :40 + T]) < 1e-5


def test_fused_rows_are_batch_invariant():
    # a 4-row forward gives each row what one-row forwards give. Bit for bit is a property of the
    # CUDA kernels (tests/models/test_fused_gpu.py checks it there); in Triton's CPU interpreter
    # tl.dot is a numpy matmul whose rounding for row j of a 16-row tile depends on the BLAS kernel
    # (it differs between CPUs), so here the rows agree to fp32 rounding, far below any indexing,
    # masking or row-mixing mistake (those show at 1e-2 and above)
    model = tiny_model(seed=5)
    c = model.cfg
    kv = KVCache(c.n_layers, 96, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    toks = torch.randint(0, c.vocab_size, (30,), generator=torch.Generator().manual_seed(2))
    model.forward(toks[:26], 0, kv)
    dec = fused.FusedDecoder(model, kv)
    four, _ = dec.forward(toks[26:30], torch.arange(26, 30))
    four = four.clone()
    for j in range(4):
        one, _ = dec.forward(toks[26 + j : 27 + j], torch.arange(26 + j, 27 + j))
        assert rel(one[0], four[j]) < 1e-6, (j, rel(one[0], four[j]))


def test_tails_leave_their_counters_zero_and_repeat_exactly():
    # each tail's last program zeroes its counter, so a repeated forward (a graph replay) finds
    # the tails where the first one did: the same bits, every counter back at zero
    model = tiny_model(seed=11, layers=3)
    c = model.cfg
    kv = KVCache(c.n_layers, 64, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    toks = torch.randint(0, c.vocab_size, (20,), generator=torch.Generator().manual_seed(3))
    dec = fused.FusedDecoder(model, kv, fused.FusedTiles(), prefill_rows=20)
    dec.forward(toks[:17], torch.arange(17), head=False)
    first = dec.forward(toks[17:20], torch.arange(17, 20))[0].clone()
    assert not dec.count.any()
    again = dec.forward(toks[17:20], torch.arange(17, 20))[0]
    assert torch.equal(first, again) and not dec.count.any()


def test_fused_rejects_too_many_rows():
    model = tiny_model(layers=3)
    c = model.cfg
    kv = KVCache(c.n_layers, 64, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    dec = fused.FusedDecoder(model, kv)
    with pytest.raises(AssertionError):
        dec.forward(torch.zeros(fused.MAX_ROWS + 1, dtype=torch.int64), torch.arange(fused.MAX_ROWS + 1))


@pytest.mark.parametrize("tiles", [fused.FusedTiles(), SMALL_CHUNKS, NO_TAILS])
def test_fused_prefill_chunk_matches_torch_and_one_row_steps(tiles):
    # one prefill chunk of 37 rows (5 attention row blocks, 3 GEMV row blocks; past the 16-cell
    # window and across key chunks) against the torch forward, and each row against a one-row
    # decode step on a cache that held the same rows before it (to fp32 rounding here; bit for bit
    # on CUDA: tests/models/test_fused_gpu.py). Small chunks: the row blocks' first chunks differ
    # and fall in different merge tiles
    model = tiny_model(seed=9, layers=3)  # a global layer and two sliding ones: the interpreter's time
    c = model.cfg
    toks = torch.randint(0, c.vocab_size, (50,), generator=torch.Generator().manual_seed(4))
    kv_ref = KVCache(c.n_layers, 96, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    model.forward(toks[:5], 0, kv_ref)
    kv_p = KVCache(c.n_layers, 96, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    kv_p.k.copy_(kv_ref.k)
    kv_p.v.copy_(kv_ref.v)
    kv_1 = KVCache(c.n_layers, 96, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    kv_1.k.copy_(kv_ref.k)
    kv_1.v.copy_(kv_ref.v)
    _, ref_h = model.forward(toks[5:42], 5, kv_ref)
    dec = fused.FusedDecoder(model, kv_p, tiles, prefill_rows=40)
    logits, hidden = dec.forward(toks[5:42], torch.arange(5, 42), head=False)
    assert logits is None and hidden.shape == (37, c.hidden)
    assert rel(hidden, ref_h) < 1e-4
    assert rel(kv_p.k[:, :42], kv_ref.k[:, :42]) < 1e-5 and rel(kv_p.v[:, :42], kv_ref.v[:, :42]) < 1e-5
    hidden = hidden.clone()
    rows = range(5, 42)
    if tiles.block_keys < 32:  # the interpreter's time: the last rows, each over the chunk's own cells
        rows = range(34, 42)
        kv_1.k.copy_(kv_p.k)
        kv_1.v.copy_(kv_p.v)
    one = fused.FusedDecoder(model, kv_1, tiles)
    for j in rows:
        _, h1 = one.forward(toks[j: j + 1], torch.arange(j, j + 1))
        assert rel(h1[0], hidden[j - 5]) < 1e-6, j
    assert rel(kv_1.k[:, 5:42], kv_p.k[:, 5:42]) < 1e-6 and rel(kv_1.v[:, 5:42], kv_p.v[:, 5:42]) < 1e-6
    with pytest.raises(AssertionError):  # the head takes at most MAX_ROWS rows, a chunk its prefill_rows
        dec.forward(toks[:9], torch.arange(9))
    with pytest.raises(AssertionError):
        dec.forward(toks[:41], torch.arange(41), head=False)


def test_step_runner_prefill_chunk_sizes_and_rows():
    # the runner's prefill chunks: prefill_rows and its halves down to 16, the rest as decode
    # steps; a chunk's hidden rows are the fused forward's (eager here: graphs need CUDA)
    from mtp_turbo.models.step import StepRunner

    model = tiny_model(seed=11, layers=3)
    c = model.cfg
    kv = KVCache(c.n_layers, 200, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    r = StepRunner(model, kv, use_graphs=False, kernels="triton")
    P = r.prefill_rows
    assert P == fused.PREFILL_ROWS
    assert [r.prefill_chunk(n) for n in (300, P, P - 1, 64, 40, 16, 15, 3)] == [P, P, P // 2, 64, 32, 16, 0, 0]
    toks = torch.randint(0, c.vocab_size, (40,), generator=torch.Generator().manual_seed(6))
    h = r.prefill(toks[8:40], 8).clone()  # a 32-row chunk at positions 8..39
    with pytest.raises(AssertionError):
        r.prefill(toks[:20], 0)  # not a chunk size
    kv2 = KVCache(c.n_layers, 200, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    kv2.k.copy_(kv.k)
    kv2.v.copy_(kv.v)
    ref = fused.FusedDecoder(model, kv2).forward(toks[39:40], torch.arange(39, 40))[1]
    assert rel(h[31], ref[0]) < 1e-6


@pytest.mark.parametrize("n_prefill,T", [(40, 4), (63, 1)])
def test_merge_split_over_head_dim_gives_the_same_bits(n_prefill, T):
    # the merge split into 2 or 4 slices of head_dim (more programs at depth) weighs every slice
    # with the same chunk weights: the same outputs as one program a row, here bit for bit (the
    # interpreter sums each column in the same order whatever the slice's width)
    model = tiny_model(seed=17)
    base = fused.FusedTiles(block_keys=4, combine_chunks=4, combine_split=1)
    (rl, _, _), (fl, fh, kf), _ = run_both(model, n_prefill, T, tiles=base)
    for ds in (2, 4):
        (_, _, _), (sl, sh, ks), _ = run_both(model, n_prefill, T, tiles=fused.FusedTiles(
            block_keys=4, combine_chunks=4, combine_split=ds))
        assert torch.equal(sl, fl) and torch.equal(sh, fh) and torch.equal(ks.k, kf.k), ds
    assert rel(fl, rl) < 1e-4
    with pytest.raises(AssertionError, match="combine_split"):
        fused.FusedDecoder(model, kf, fused.FusedTiles(combine_split=3))


@pytest.mark.parametrize("tails", [True, False])
def test_first_weight_chunk_before_the_wait_gives_the_same_bits(tails):
    # pdl_w0 takes each GEMV's first K step out of its loop (its weights loaded before the PDL wait):
    # the same products in the same order, so the same bits, with 16-wide K steps so that the loop
    # still runs after it; pdl itself needs CUDA (sm_90+) and is ignored here
    model = tiny_model(seed=19)
    small = dict(bk_small=16, bk_gated=16, bk_tall=16, tails=tails)
    (rl, _, _), (fl, fh, kf), _ = run_both(model, 40, 4, tiles=fused.FusedTiles(**small))
    (_, _, _), (wl, wh, kw), _ = run_both(model, 40, 4, tiles=fused.FusedTiles(pdl=1, pdl_w0=True, **small))
    assert torch.equal(wl, fl) and torch.equal(wh, fh)
    assert torch.equal(kw.k, kf.k) and torch.equal(kw.v, kf.v)
    assert rel(wl, rl) < 1e-4
    with pytest.raises(AssertionError, match="pdl 3"):
        fused.FusedDecoder(model, kf, fused.FusedTiles(pdl=3))


def test_q8_head_rows_are_the_frag8_gemv_s_at_every_row_count():
    # with the embedding's Q8_0 codes kept (CUDA's engine; here on the CPU the frag8 launch is x_frag8
    # interpreted, then its exact emulation), the head is the frag8 GEMV on them: each row's logits
    # are those of that row alone through the GEMV, in forwards of 1, 4 and 5 rows (two launches:
    # rows 0-3, row 4), with and without tails; the layers' outputs are the dense head's decoder's
    # bit for bit, the logits close to its fp32 GEMV on the dequantized embedding
    from mtp_turbo.quant.gemv import TileConfig
    from mtp_turbo.quant.kernels import frag8_gemv

    # hidden 96: K ends inside a 64-column chunk; vocab 300: N inside a 16-row tile
    model = tiny_model(seed=21, layers=3, hidden=96, vocab=300, head_q8=True)
    c = model.cfg
    toks = torch.randint(0, c.vocab_size, (30,), generator=torch.Generator().manual_seed(5))
    kv0 = KVCache(c.n_layers, 64, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    model.forward(toks[:25], 0, kv0)

    def cache():
        kv = KVCache(c.n_layers, 64, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
        kv.k.copy_(kv0.k)
        kv.v.copy_(kv0.v)
        return kv

    assert fused.FusedDecoder(model, cache(), fused.FusedTiles(head_q8=False)).head_w is None
    for tiles in (fused.FusedTiles(), NO_TAILS):
        dec = fused.FusedDecoder(model, cache(), tiles)
        dense = fused.FusedDecoder(model, cache(), fused.FusedTiles(head_q8=False, tails=tiles.tails))
        assert dec.head_w is model.head_packed() and "frag8" in dec.head_w.derived  # built with the decoder
        for T in ((1, 4, 5) if tiles.tails else (5,)):
            pos = torch.arange(25, 25 + T)
            lq, hq = (t.clone() for t in dec.forward(toks[25:25 + T], pos))
            x = dec.xn[:T].clone()  # the normed rows the head read
            ld, hd = dense.forward(toks[25:25 + T], pos)
            assert torch.equal(hq, hd) and torch.equal(x, dense.xn[:T]), T
            for j in range(T):
                one = torch.empty(1, c.vocab_size)
                frag8_gemv.launch(x[j:j + 1], model.head_packed(), TileConfig("frag8", 32, 64, 4, 2), one)
                assert torch.equal(lq[j], one[0]), (T, j)
            assert rel(lq, ld) < 1e-5, (T, rel(lq, ld))


def test_q8_head_gives_a_row_the_same_bits_in_every_call():
    # the head alone on fixed rows (sizes over 12 binades: x's int8 pieces are scaled per row and
    # chunk): rows 0-7 through calls of 1, 2, 3, 4, 5 and 8 rows give each row the same bits, within
    # the fp32 bound of the float64 product with the dequantized Q8_0 weights
    model = tiny_model(seed=23, layers=3, hidden=96, vocab=300, head_q8=True)
    c = model.cfg
    kv = KVCache(c.n_layers, 16, c.n_kv_heads, c.head_dim, "cpu", torch.float32)
    dec = fused.FusedDecoder(model, kv)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(8, c.hidden, generator=g) * torch.exp2(torch.randint(-6, 6, (8, 1), generator=g).float())
    w = model.head_packed().dequantize().double()
    ref = x.double() @ w.t()
    bound = 1e-6 * (x.double().abs() @ w.abs().t())
    full = dec.head(x).clone()
    assert torch.all((full.double() - ref).abs() <= bound)
    for n in (1, 2, 3, 4, 5):
        for r0 in range(0, 8 - n + 1, n):
            assert torch.equal(dec.head(x[r0:r0 + n]), full[r0:r0 + n]), (n, r0)
    with pytest.raises(AssertionError):  # a draft tree's rows at most
        dec.head(torch.zeros(fused.MAX_TREE_ROWS + 1, c.hidden))


def _bits(t):
    return t.view({torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[t.dtype])


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")  # the interpreter's numpy, at the largest values
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
def test_input_rows_are_torch_s_scaled_embedding_bit_for_bit(dtype):
    # the forward's first kernel (models/embed.py): embed[tokens] * embed_scale as torch computes it
    # in the model dtype (bf16: the fp32 product rounded to nearest even, ties included; subnormal
    # inputs; products past the largest value), every row of a 128-row prefill chunk and of 1 row
    import math

    from mtp_turbo.models.embed import scaled_embedding

    g = torch.Generator().manual_seed(3)
    V, D = 500, 640
    emb = (torch.randn(V, D, generator=g) * torch.exp2(torch.randint(-20, 8, (V, 1), generator=g).float())).to(dtype)
    big = torch.finfo(dtype).max
    emb[7, :6] = torch.tensor([0.0, -0.0, big, -big, 1e-39 if dtype != torch.float16 else 1e-6, 3.0]).to(dtype)
    scale = torch.tensor(math.sqrt(D), dtype=dtype)  # as a Gemma-3 Decoder keeps it
    for T in (128, 1):
        toks = torch.randint(0, V, (T,), generator=g)
        toks[0] = 7
        out = torch.full((T + 2, D), 5.0, dtype=dtype)  # the decoder's residual buffer: rows past T untouched
        scaled_embedding(emb, scale, toks, out[:T])
        want = torch.mul(emb[toks], scale)
        assert torch.equal(_bits(out[:T]), _bits(want)), (dtype, T)
        assert (out[T:] == 5.0).all()
    if dtype == torch.bfloat16:  # ties to even occurred (the fp32 product's low 16 bits 0x8000)
        p = (emb.float() * scale.float()).view(torch.int32)
        assert ((p & 0xFFFF) == 0x8000).sum() > 100


@pytest.mark.gpu
def test_cuda_input_rows_are_torch_s_bf16_embedding_in_a_graph():
    # on the GPU, the 270M model's embedding shape in bf16: the kernel's rows equal torch.mul's bit
    # for bit, eagerly and replayed from a CUDA graph on new tokens
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (run on the device machine)")
    import math

    from mtp_turbo.models.embed import scaled_embedding

    g = torch.Generator(device="cuda").manual_seed(0)
    emb = (torch.randn(262144, 640, device="cuda", generator=g) * 0.03).to(torch.bfloat16)
    scale = torch.tensor(math.sqrt(640), dtype=torch.bfloat16, device="cuda")
    toks = torch.randint(0, 262144, (128,), device="cuda", generator=g)
    out = torch.empty(128, 640, dtype=torch.bfloat16, device="cuda")
    for T in (1, 4, 8, 128):
        scaled_embedding(emb, scale, toks[:T], out[:T])
        assert torch.equal(_bits(out[:T]), _bits(torch.mul(emb[toks[:T]], scale)))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scaled_embedding(emb, scale, toks[:8], out[:8])
    for _ in range(3):
        toks.copy_(torch.randint(0, 262144, (128,), device="cuda", generator=g))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(_bits(out[:8]), _bits(torch.mul(emb[toks[:8]], scale)))


@pytest.mark.parametrize("silu", [False, True])
def test_gated_act_gates_a_float32_gate_up_output(silu):
    # the gating after a gate|up GEMV that writes float32 (the frag layouts, the MTP head's packed ops),
    # in float32 activations (the interpreter's bf16 casts truncate): act(gate) * up against torch's
    # activation (its tanh / exp differ by float32 ulps)
    from mtp_turbo.models import fused_kernels as fk

    g = torch.Generator().manual_seed(3)
    M, F = 3, 1100  # a partial last column block
    y2 = torch.randn(M, 2 * F, generator=g) * 3
    gu = torch.full((M, F), float("nan"))
    fk.gated_act[(-(-F // 1024), M)](y2, gu, F, BN=1024, SILU=silu, num_warps=4)
    gate, up = y2[:, :F], y2[:, F:]
    act = torch.nn.functional.silu(gate) if silu else torch.nn.functional.gelu(gate, approximate="tanh")
    assert torch.allclose(gu, act * up, rtol=1e-5, atol=1e-5)  # the tanh form near -1: absolute error
