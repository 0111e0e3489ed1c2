"""The timed rows of `mtp-turbo bench` on one engine: every (mode, k) at every temperature over the
same prompts, with the texts checked against each other; the ppN prefill; the bandwidth floor.

Each generation starts from an empty cache (no prompt reuse between runs), so prompt speeds are
prefill speeds and every run of a row does the same work."""

from __future__ import annotations

import dataclasses
import statistics
import time

import torch

from ..quant.planes import weight_tensors
from ..sampling.config import SamplerConfig
from ..spec.config import SpecConfig


def fresh(eng) -> None:
    """Forget the committed sequence: the next prompt is prefilled whole."""
    eng.reset()


def sampler_at(base: SamplerConfig, temp: float) -> SamplerConfig:
    """temp 0: greedy without penalties (llama-bench's tg); else the sampled chain at temp."""
    if temp == 0:
        return SamplerConfig(temperature=0.0, seed=base.seed, order=base.order)
    return dataclasses.replace(base, temperature=temp)


def _spec_figures(sp) -> dict:
    """A run's speculation counts from its RoundStats (None: plain decoding)."""
    if sp is None:
        return {}
    return {"rounds": sp.rounds, "drafted": sp.drafted, "accepted": sp.accepted, "emitted": sp.emitted,
            "round_s": sp.round_s, "host_s": sp.host_s, "draft_s": sp.draft_s, "verify_s": sp.verify_s,
            "accept_s": sp.accept_s, "k_counts": dict(sp.k_counts)}


def generate(eng, prompt, sampler, spec, max_tokens: int, stop_ids) -> tuple[list[int], dict]:
    fresh(eng)
    ids = [t for p in eng.generate(prompt, sampler=sampler, max_tokens=max_tokens, spec=spec, stop_ids=stop_ids)
           for t in p.token_ids]
    st = eng.last_stats
    return ids, {"prompt_tokens": st.prompt_tokens, "prompt_cached": st.prompt_cached, "prompt_s": st.prompt_s,
                 "gen_tokens": st.gen_tokens, "decode_s": st.decode_s, "captures": st.captures,
                 **_spec_figures(st.spec)}


def aggregate(mode: str, k: int | None, temp: float, runs: list[dict], same: bool) -> dict:
    """One table row from its runs: sums, then ratios (so long runs weigh more, as in tok/s)."""
    tot = {key: sum(r.get(key, 0) for r in runs) for key in
           ("gen_tokens", "decode_s", "prompt_s", "rounds", "drafted", "accepted", "emitted", "round_s", "host_s",
            "draft_s", "verify_s", "accept_s", "captures")}
    uncached = sum(r["prompt_tokens"] - r["prompt_cached"] for r in runs)
    dec = tot["decode_s"]
    row = {"mode": "plain" if mode == "none" else mode, "k": k, "temp": temp, "runs": len(runs),
           "gen_tokens": tot["gen_tokens"], "decode_s": dec,
           "decode_tps": tot["gen_tokens"] / dec if dec > 0 else 0.0,
           "prompt_tps": uncached / tot["prompt_s"] if tot["prompt_s"] > 0 else 0.0,
           "tokens_per_round": tot["emitted"] / tot["rounds"] if tot["rounds"] else 1.0,
           "acceptance": tot["accepted"] / tot["drafted"] if tot["drafted"] else None,
           "same_text": same, "captures": tot["captures"]}
    ks: dict[int, int] = {}  # rounds per number of drafts (an adaptive chooser's picks)
    for r in runs:
        for kk, n in r.get("k_counts", {}).items():
            ks[kk] = ks.get(kk, 0) + n
    if ks:
        row["k_counts"] = dict(sorted(ks.items()))
    if tot["rounds"] and dec > 0:
        # shares of decode time: the rounds' device program (its parts when timed apart), their host
        # work, and the rest (streaming, detokenizing, stop checks)
        parts = {name: tot[f"{name}_s"] / dec for name in ("draft", "verify", "accept") if tot[f"{name}_s"] > 0}
        rounds = tot["round_s"] / dec if tot["round_s"] else sum(parts.values())
        host = tot["host_s"] / dec
        row["split"] = {**parts, "device": max(0.0, rounds - host), "host": host, "other": max(0.0, 1.0 - rounds)}
    return row


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def run_rows(eng, cfg, base: SamplerConfig, prompts: list[str], bar) -> tuple[list[dict], list[str]]:
    """Rows in order: per temperature, plain first (the reference), then each drafter x k.
    Returns (rows, mismatches): a row whose tokens differ from the reference for any prompt, or
    from its own first rep, is a bug (exactness: same seed, same text)."""
    stop_ids = () if cfg.ignore_eos else None
    modes = sorted(cfg.mode_list, key=lambda m: m != "none")
    configs = [(m, None, "") if m == "none" else (m, k, "") for m in modes
               for k in ((None,) if m == "none" else cfg.k_list)]
    configs += [("mtp", None, t) for t in cfg.tree_list]  # draft trees: mtp rows of their own
    rows, mismatches = [], []
    for temp in cfg.temp_list:
        sampler = sampler_at(base, temp)
        reference: dict[int, list[int]] | None = None
        ref_name = ""
        for mode, k, tree in configs:
            spec = None if mode == "none" else SpecConfig(draft=mode, draft_tokens=k or 0, adaptive=cfg.adaptive,
                                                          round_split=cfg.split, draft_tree=tree,
                                                          draft_model=cfg.draft_model if mode == "model" else None,
                                                          drafter=(cfg.drafter or None) if mode == "mtp" else None)
            name = f"{'plain' if mode == 'none' else mode}{'' if k is None else f' k={k}'}" \
                   f"{f' tree={tree}' if tree else ''} temp={temp:g}"
            bar.set_description(name)
            if cfg.warmup:  # every prompt once, as timed: each shape the runs use captures its graph here
                for prompt in prompts:
                    generate(eng, prompt, sampler, spec, cfg.max_tokens, stop_ids)
                    bar.update()
            runs, ids_of, secs_of = [], {}, {}
            for rep in range(cfg.reps):
                for i, prompt in enumerate(prompts):
                    ids, fig = generate(eng, prompt, sampler, spec, cfg.max_tokens, stop_ids)
                    bar.update()
                    runs.append(fig)
                    secs_of[i] = secs_of.get(i, 0.0) + fig["decode_s"]
                    if i in ids_of and ids != ids_of[i]:
                        mismatches.append(f"{name}: prompt {i} rep {rep} differs from rep 0 at token "
                                          f"{first_difference(ids, ids_of[i])}")
                    ids_of.setdefault(i, ids)
            same = True
            if reference is None:
                reference, ref_name, ref_secs = ids_of, name, secs_of
            else:
                for i, ids in ids_of.items():
                    if ids != reference[i]:
                        same = False
                        mismatches.append(f"{name}: prompt {i} differs from {ref_name} at token "
                                          f"{first_difference(ids, reference[i])} of {len(ids)}")
            row = aggregate(mode, k, temp, runs, same)
            if tree:
                row["tree"] = tree
            if secs_of is not ref_secs:
                row["worst_prompt"] = worst_prompt(ref_secs, secs_of)
            rows.append(row)
    return rows, mismatches


def worst_prompt(ref_secs: dict[int, float], secs: dict[int, float]) -> dict | None:
    """The prompt where this row is slowest against the reference row (plain): its speed ratio
    (reference decode seconds / this row's; same tokens, as the texts are equal) and its index."""
    ratios = {i: ref_secs[i] / s for i, s in secs.items() if s > 0 and ref_secs.get(i, 0) > 0}
    if not ratios:
        return None
    i = min(ratios, key=ratios.get)
    return {"prompt": i, "ratio": ratios[i]}


def prefill_speed(eng, n: int, prompts: list[str], reps: int, warmup: bool, bar) -> dict:
    """Prompt speed as llama-bench's ppN: an n-token prompt (the prompt set's tokens, repeated)
    prefilled from an empty cache, plain; the median over reps."""
    tok = eng.tokenizer
    body = [t for p in prompts for t in tok.encode(p, add_bos=False)] or [tok.bos_id + 1]
    ids = [tok.bos_id] + (body * (n // len(body) + 1))[: n - 1]
    greedy = SamplerConfig(temperature=0.0)
    tps = []
    for i in range(reps + warmup):
        fresh(eng)
        for _ in eng.generate(ids, sampler=greedy, max_tokens=1, stop_ids=()):
            pass
        bar.update()
        if i >= warmup:
            tps.append(eng.last_stats.prompt_tps)
    return {"n": n, "tps": statistics.median(tps), "name": f"pp{n}"}


def memory(eng) -> dict:
    """Resident memory after the runs: the model's weights as held (each storage once: the fused
    qkv / gate_up, not their views; the head's Q8_0 codes where kept, and the layouts built from them
    for a GEMV: the fused step's frag8 layout), the K/V cache, and what the device allocator holds
    now and held at most (CUDA), or the process's peak RSS (CPU)."""
    import resource

    m = eng.model
    head = m.head_op if m.head_op is not None else m.head_weight  # a CPU int8 head, or the dense / file's one
    weights = _unique_bytes([*m.embed_tensors(), m.out_norm, *weight_tensors(head),
                             *(t for L in m.layers for w in L.values() for t in weight_tensors(w))])
    head_q8 = _unique_bytes(m.head_q8 or ())
    pw = m.head_packed() if m.head_q8 is not None else None
    layouts = _unique_bytes(t for d in (pw.derived.values() if pw is not None else ())
                            for t in ((d,) if isinstance(d, torch.Tensor) else vars(d).values()))
    out = {"weights_MiB": weights / 2**20, "head_q8_MiB": head_q8 / 2**20, "head_layout_MiB": layouts / 2**20,
           "kv_MiB": _unique_bytes([eng.kv.k, eng.kv.v]) / 2**20}
    if eng.device.type == "cuda":
        out |= {"allocated_MiB": torch.cuda.memory_allocated(eng.device) / 2**20,
                "peak_allocated_MiB": torch.cuda.max_memory_allocated(eng.device) / 2**20,
                "reserved_MiB": torch.cuda.memory_reserved(eng.device) / 2**20}
    else:
        out["peak_rss_MiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return out


def _unique_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            if s.data_ptr() not in seen:
                seen.add(s.data_ptr())
                total += s.nbytes()
    return total


def copy_bandwidth(device: torch.device) -> float:
    """GB/s (bytes read + written) of a large copy on the device."""
    if device.type == "cuda":
        from ..check.bytefloor import measure_copy_bandwidth

        return measure_copy_bandwidth()
    a = torch.empty(1 << 26, dtype=torch.float32)  # 256 MiB
    b = torch.empty_like(a)
    b.copy_(a)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        b.copy_(a)
        times.append(time.perf_counter() - t0)
    return 2 * a.numel() * 4 / min(times) / 1e9


def step_weight_bytes(m, q8_head: bool) -> int:
    """Weight bytes a plain 1-row step of the main model m (a Decoder) reads, each byte once: every
    layer's matrices, norms and biases (q / k / v and gate / up are views of the fused qkv / gate_up:
    counted as the memory they span), the final norm, one embedding row, and the LM head: the file's
    Q8_0 codes and scales where the step's head reads them (q8_head), else the dense head (the
    embedding when tied, which holds that row)."""
    tensors = [m.out_norm, *(t for L in m.layers for w in L.values() for t in weight_tensors(w))]
    if q8_head:
        tensors += [*m.embed_tensors(one_row=True), *m.head_q8]
    else:  # the head as the fused step reads it: dense, or the file's bytes where kept
        tensors += [*m.embed_tensors(one_row=True), *weight_tensors(m.head_weight)]
    return _span_bytes(tensors)


def step_reads_q8_head(eng) -> bool:
    """Whether the engine's decode step runs its LM head on the file's Q8_0 bytes (the fused step's
    frag8 head, models/fused.py), not on the dense embedding."""
    fused = getattr(getattr(eng, "runner", None), "fused", None)
    return getattr(fused, "head_w", None) is not None


def _span_bytes(tensors) -> int:
    """Bytes of memory the (contiguous) tensors cover together, each byte once: views of one
    storage count once, the parts of a storage no tensor covers not at all."""
    spans = []
    for t in tensors:
        assert t.is_contiguous(), t.shape
        spans.append((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()))
    total, end = 0, 0
    for a, b in sorted(spans):
        total += max(0, b - max(a, end))
        end = max(end, b)
    return total


def bandwidth_floor(eng, context: int) -> dict | None:
    """Bytes a plain decode step reads at `context` cells (every weight byte once, the head's as the
    step reads it: step_weight_bytes; the K/V attended) over the copy bandwidth: the tok/s no plain
    decoder on this device can beat."""
    m = eng.model
    try:
        weights = step_weight_bytes(m, step_reads_q8_head(eng))
        c, kv = m.cfg, eng.kv
        cell = 2 * c.n_kv_heads * c.head_dim * kv.k.element_size()
        window = c.sliding_window or context
        kv_bytes = sum(cell * (context if c.is_global(i) else min(context, window)) for i in range(c.n_layers))
    except (AttributeError, TypeError):
        return None  # the model's layout changed: no floor rather than a wrong one
    bw = copy_bandwidth(eng.device)
    total = weights + kv_bytes
    return {"weight_bytes": weights, "kv_bytes": kv_bytes, "context": context, "bandwidth_GBps": bw,
            "head": "q8_0" if step_reads_q8_head(eng) else "dense",
            "ms_per_token": total / (bw * 1e9) * 1e3, "tps": bw * 1e9 / total}
