"""KChooser against simulated decoding: known round times and acceptance, so the best k is known."""

import random

from mtp_turbo.spec.adaptive import KChooser


def simulate(chooser: KChooser, accept_p: float, ms: dict[int, float], rounds: int, seed: int = 0,
             fresh_ms: float = 0.0, hiccup_every: int = 0) -> dict[int, int]:
    """Run `rounds` rounds: each drafted position is accepted with accept_p (independently, in a
    chain), a round of k takes ms[k]; the first round of each k costs fresh_ms more and says so,
    and every hiccup_every-th round is 100x slow without saying so. Returns rounds per k."""
    rng = random.Random(seed)
    counts: dict[int, int] = {}
    seen = set()
    for r in range(rounds):
        k = chooser.choose()
        a = 0
        while a < k and rng.random() < accept_p:
            a += 1
        fresh = k not in seen
        seen.add(k)
        t = ms[k] + (fresh_ms if fresh else 0.0)
        if hiccup_every and r % hiccup_every == hiccup_every - 1:
            t *= 100
        chooser.update(k, k, a, t / 1e3, fresh=fresh)
        counts[k] = counts.get(k, 0) + 1
    return counts


def test_high_acceptance_settles_on_many_drafts_despite_captures_and_hiccups():
    ms = {k: 1.0 + 0.2 * k for k in range(5)}  # E(k)/T(k) at 90%: 1.00 1.58 1.94 2.15 2.28
    c = KChooser(4)
    counts = simulate(c, 0.9, ms, 600, fresh_ms=300.0, hiccup_every=50)
    assert c.best() >= 3
    assert counts.get(3, 0) + counts.get(4, 0) > 0.8 * 600, counts
    assert counts.get(0, 0) < 0.1 * 600, counts


def test_low_acceptance_decodes_plainly():
    ms = {k: 1.0 + 0.5 * k for k in range(4)}  # at 10% acceptance any draft costs more than it gives
    c = KChooser(3)
    counts = simulate(c, 0.1, ms, 600, fresh_ms=300.0)
    assert c.best() == 0
    assert counts.get(0, 0) > 0.8 * 600, counts


def test_a_run_of_bad_luck_does_not_park_the_chooser_at_plain():
    # 49% acceptance a position (the temp-0.6 figure), a draft round 1.3x a plain step: k = 1 pays
    # 15% (E/T 1.49 / 1.3 against 1 / 1). With a window of ~10 rounds, streaks of rejections sent
    # the chooser to k = 0, where nothing updates the estimate (it drafted in 4-23% of the rounds);
    # with ~33 rounds and tries that judge on their own rounds it drafts but for the k = 0 tries
    # that time plain steps (4 rounds in 32)
    ms = {0: 1.0, 1: 1.3}
    for seed in range(4):
        counts = simulate(KChooser(1), 0.49, ms, 2000, seed=seed)
        assert counts.get(1, 0) > 0.8 * 2000, (seed, counts)


def test_a_fresh_round_is_not_a_timing_and_a_slow_one_is_clipped():
    c = KChooser(2, clip=2.0)
    c.update(2, 2, 1, 5.0, fresh=True)
    assert c.t[2] is None and c.seen[2] == 1
    c.update(2, 2, 1, 0.010)
    c.update(2, 2, 1, 10.0)  # a 1000x hiccup counts as 2x
    assert abs(c.t[2] - (0.9 * 0.010 + 0.1 * 0.020)) < 1e-12


def test_fixed_k_when_not_adaptive():
    c = KChooser(3, adaptive=False)
    assert simulate(c, 0.0, {k: 1.0 for k in range(4)}, 50) == {3: 50}


def test_tries_from_plain_back_off_and_a_new_kind_of_text_still_moves_k():
    ms = {k: 1.0 + 0.2 * k for k in range(5)}
    c = KChooser(4, probe=32, probe_max=1024)
    counts = simulate(c, 0.05, ms, 3000, fresh_ms=300.0)
    # timing each k (twice: the first is fresh), then tries of 4 rounds at gaps 32, 64, ... 1024
    # (6 in 3000 rounds); a try judges on its own rounds, so one with a lucky acceptance drafts a
    # few rounds more before the estimate sinks again: 2% of the rounds at most, not a round in 32
    assert sum(n for k, n in counts.items() if k) <= 0.02 * 3000, counts
    assert counts.get(4, 0) + counts.get(3, 0) <= 2 * 2 + 2 * 6, counts
    later = simulate(c, 0.9, ms, 4000, seed=1)
    assert later.get(3, 0) + later.get(4, 0) > 0.5 * 4000, later
