"""Draft trees: the walk equals the chain rule on chains, trees give plain sampling's text for any drafts,
and a depth's acceptance is the target's mass on the children there (enumeration against Monte Carlo)."""

import pytest
import torch

from mtp_turbo.sampling.chain import sample_dist
from mtp_turbo.sampling.config import SamplerConfig
from mtp_turbo.sampling.draw import sample
from mtp_turbo.spec.tree import accept_tree
from mtp_turbo.spec.tree_shape import TreeShape, chain_shape
from mtp_turbo.spec.verify import accept_exact

from .test_verify import CFGS, Model, plain

SHAPES = [
    chain_shape(3),
    TreeShape((-1, 0, 0, 1, 2, 3)),  # two children at depth 1, a chain below each
    TreeShape((-1, 0, 0, 0, 1, 1, 2, 4, 5, 7)),  # 3 children, then 2, then chains
]


def test_chain_shape_is_the_chain_rule():
    g = torch.Generator().manual_seed(0)
    for k in (1, 2, 4):
        t = torch.randint(0, 3, (500, k + 1), generator=g)
        d = torch.randint(0, 3, (500, k), generator=g)
        tokens = torch.cat([torch.full((500, 1), 7), d], dim=1)
        acc, out, last = accept_tree(t, tokens, chain_shape(k))
        want_acc, want_out = accept_exact(t, d)
        assert torch.equal(acc, want_acc) and torch.equal(out, want_out) and torch.equal(last, acc)


def test_walk_by_hand():
    shape = TreeShape((-1, 0, 0, 1, 2))  # root -> {1, 2}; 1 -> 3; 2 -> 4
    tokens = torch.tensor([0, 5, 6, 7, 8])
    # the root draws 6: node 2 accepted; node 2 draws 8: node 4 accepted; node 4 draws 9: emitted
    acc, out, last = accept_tree(torch.tensor([6, 0, 8, 0, 9]), tokens, shape)
    assert (acc.item(), out.tolist(), last.item()) == (2, [6, 8, 9], 4)
    acc, out, last = accept_tree(torch.tensor([5, 1, 8, 0, 9]), tokens, shape)  # node 1 draws 1, not 7
    assert (acc.item(), out.tolist(), last.item()) == (1, [5, 1, -1], 1)
    acc, out, last = accept_tree(torch.tensor([4, 7, 8, 0, 9]), tokens, shape)  # no child holds 4
    assert (acc.item(), out.tolist(), last.item()) == (0, [4, -1, -1], 0)
    # the root's own token is no child's sibling: a child holding it is still accepted
    acc, out, last = accept_tree(torch.tensor([5, 7, 8, 0, 9]), torch.tensor([5, 5, 6, 7, 8]), shape)
    assert (acc.item(), out.tolist(), last.item()) == (2, [5, 7, 0], 3)
    # two siblings of one token: the first is taken, its subtree followed
    dup = torch.tensor([0, 5, 5, 7, 8])
    acc, out, last = accept_tree(torch.tensor([5, 7, 8, 3, 9]), dup, shape)
    assert (acc.item(), out.tolist(), last.item()) == (2, [5, 7, 3], 3)


@pytest.mark.parametrize("bad", [(), (0, 0), (-1, 1), (-1, 0, 2), tuple([-1] + [0] * 16)])
def test_bad_shapes_are_refused(bad):
    with pytest.raises(ValueError):
        TreeShape(bad)


def tree_round(model, h, cfg, shape, drafts):
    """One verified tree: each node's row and the target's draw at its position, then the walk."""
    paths = [[drafts[m] for m in shape.ancestors[n][1:] if m >= 0] for n in range(shape.nodes)]
    t = torch.stack([sample(model(h + p)[None], torch.tensor(h + p), cfg, torch.tensor([len(h) + len(p)]))[0]
                     for p in paths])
    acc, out, last = accept_tree(t, torch.tensor([-1] + drafts[1:]), shape)
    return out[: int(acc) + 1].tolist()


def noisy_drafts(model, h, shape, g):
    """Children from a perturbed copy of the model: each node's children are its distinct best
    tokens in order (the drafter's argmax, its second best, ...)."""
    drafts, paths = [None] * shape.nodes, {0: []}
    for n in range(1, shape.nodes):
        q = shape.parents[n]
        rank = sum(1 for m in range(1, n) if shape.parents[m] == q)
        logits = model(h + paths[q]) + 1.5 * torch.randn(model.a.shape[0], generator=g)
        drafts[n] = int(logits.topk(rank + 1).indices[rank])
        paths[n] = paths[q] + [drafts[n]]
    return drafts


@pytest.mark.parametrize("cfg", CFGS)
@pytest.mark.parametrize("shape", SHAPES, ids=["chain", "two", "three"])
def test_tree_decoding_is_plain_sampling_text(cfg, shape):
    model, prompt = Model(5), [2, 4, 6]
    want = plain(model, prompt, 24, cfg)
    g = torch.Generator().manual_seed(1)
    h, rounds = list(prompt), 0
    while len(h) < len(want):
        h += tree_round(model, h, cfg, shape, noisy_drafts(model, h, shape, g))
        rounds += 1
    assert h[: len(want)] == want
    assert rounds < 24  # drafts were accepted


def test_acceptance_is_the_mass_on_the_children():
    """P(depth 1 accepted) = p(children of the root) exactly; Monte Carlo over seeds within 4 sigma,
    and the children replaced by the argmax alone gives its own (smaller) mass."""
    model, h = Model(9), [3, 1, 4]
    shape = TreeShape((-1, 0, 0, 0, 1))
    base = SamplerConfig(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0)
    p = sample_dist(model(h)[None], torch.tensor(h), base)[0].double()
    kids = p.topk(3).indices.tolist()
    drafts = [-1, *kids, 0]
    want = float(p[kids].sum())
    n = 3000
    hits = sum(len(tree_round(model, h, SamplerConfig(**{**base.__dict__, "seed": s}), shape, drafts)) > 1
               for s in range(n))
    sigma = (want * (1 - want) / n) ** 0.5
    assert abs(hits / n - want) < 4 * sigma, (hits / n, want)
    assert want > float(p.max()) + 8 * sigma  # the tree's gain is resolvable at this n


def test_the_walk_reads_nothing_from_the_host():
    # a tree round is replayed from a CUDA graph: no op of the walk may read a value on the host or
    # copy one from it (a 0-dim index tensor, a Python scalar assigned); checked on the CPU by the ops
    from torch.utils._python_dispatch import TorchDispatchMode

    host = ("item", "_local_scalar_dense", "lift_fresh", "is_nonzero", "nonzero", "equal")

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.add(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    shape = SHAPES[2]
    tokens = torch.arange(shape.nodes) % 3
    t = torch.ones(shape.nodes, dtype=torch.int64)
    accept_tree(t, tokens, shape)  # the shape's tables made once, outside the check, as the engine does
    with Ops() as ops:
        accept_tree(t, tokens, shape)
    assert ops.seen and not ops.seen & set(host), ops.seen & set(host)
