"""The CPU thread chooser (threads.py): it keeps the faster count, probes the other every period,
and follows a change in which is faster; a fixed --threads count is set once."""

import torch

from mtp_turbo.threads import ThreadChooser, available_cores


def run(ch, cost_of, tokens):
    used = []
    for _ in range(tokens):
        used.append(ch.current)
        ch.record(cost_of(ch.current), 1)
    return used


def test_keeps_the_faster_count_and_probes_the_other():
    ch = ThreadChooser((2, 1), period=16, probe=3)
    used = run(ch, {2: 0.015, 1: 0.022}.get, 200)
    assert used[:5].count(1) >= 1  # both measured at the start
    assert used[50:].count(2) >= 0.75 * 150  # mostly the faster
    assert 1 in used[100:]  # and the other probed again later


def test_follows_a_change_of_load():
    ch = ThreadChooser((2, 1), period=16, probe=3)
    run(ch, {2: 0.015, 1: 0.022}.get, 64)
    used = run(ch, {2: 0.053, 1: 0.023}.get, 200)  # another process took a core: 2 threads stall
    assert used[-100:].count(1) >= 75


def test_one_option_never_probes_and_apply_sets_torch(monkeypatch):
    ch = ThreadChooser((1,))
    assert run(ch, lambda n: 0.01, 20) == [1] * 20
    n = torch.get_num_threads()
    try:
        ThreadChooser((1, 2)).apply()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(n)
    assert available_cores() >= 1


def test_engine_threads_flag(engine):
    from mtp_turbo.engine import Engine, EngineConfig

    n = torch.get_num_threads()
    try:
        fixed = Engine(EngineConfig(model=str(engine.gguf.path), device="cpu", ctx_size=64, progress=False,
                                    cpu_weights="f32", threads=1), gguf=engine.gguf)
        assert fixed.threads is None and torch.get_num_threads() == 1
        assert engine.threads is not None and engine.threads.options == (available_cores(), 1) or available_cores() == 1
    finally:
        torch.set_num_threads(n)
