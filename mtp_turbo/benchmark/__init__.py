"""`mtp-turbo bench`, in the spirit of llama-bench: for the model on this machine, plain / MTP /
n-gram decoding x greedy / sampled: decode tok/s, prompt tok/s, tokens per round, acceptance, the
time split (draft / verify / accept / other), every row's text checked (at temp 0 a drafter's
text must equal plain greedy's; at temp > 0 the same seed must give the same text); llama.cpp's
llama-bench and llama-completion beside it in the same run; the bandwidth floor; a markdown
table, JSON and a plot.

Parts: config.py (flags, prompt sets; no torch), run.py (the timed rows on the engine),
peers.py (llama.cpp), report.py (table, JSON, plot).
"""

from __future__ import annotations


def add_parser(sub) -> None:
    from ..cli import COMMANDS
    from ..cli import HELP as FIELD_HELP
    from ..cli import add_config_args, engine_config_class
    from ..sampling.config import SamplerConfig
    from .config import HELP, SAMPLED, BenchConfig

    p = sub.add_parser("bench", help=COMMANDS["bench"][0], description=__doc__.split("\n\nParts:")[0])
    add_config_args(p, BenchConfig, help=HELP)
    add_config_args(p, engine_config_class())
    add_config_args(p, SamplerConfig, skip=("temperature",),
                    help={**FIELD_HELP, "seed": "seed of every sampled run (the same for every row, so their texts "
                          "must agree)"})
    p.set_defaults(func=cmd_bench, **SAMPLED)


def cmd_bench(args) -> int:
    import dataclasses
    import json
    import sys

    from ..cli import config_from_args, engine_config_class, model_file
    from ..errors import ConfigError
    from ..sampling.config import SamplerConfig
    from . import peers, report
    from .config import BenchConfig, load_prompts

    cfg = config_from_args(BenchConfig, args)
    base = config_from_args(SamplerConfig, args, temperature=0.8)
    ecfg = config_from_args(engine_config_class(), args)
    if cfg.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ConfigError("--plot needs matplotlib: pip install 'mtp-turbo[bench]'") from None
    prompts = load_prompts(cfg.prompts, cfg.n_prompts)
    model = str(model_file(ecfg))

    import torch
    from tqdm import tqdm

    from ..engine import Engine
    from .run import bandwidth_floor, memory, prefill_speed, run_rows

    eng = Engine(ecfg)
    if cfg.chat:
        from ..cli import chat_prompt_of

        prompts = [chat_prompt_of(eng.gguf, [{"role": "user", "content": p}]).text for p in prompts]
    if cfg.pp >= eng.ctx_size or max(len(eng.tokenizer.encode(p)) for p in prompts) + cfg.max_tokens > eng.ctx_size:
        raise ConfigError(f"the prompts + --max-tokens {cfg.max_tokens} (or --pp {cfg.pp}) exceed the context "
                          f"{eng.ctx_size}: raise --ctx-size")
    n_rows = (sum(1 if m == "none" else len(cfg.k_list) for m in cfg.mode_list) + len(cfg.tree_list)) \
        * len(cfg.temp_list)
    total = n_rows * (cfg.warmup + cfg.reps) * len(prompts) + (cfg.reps + cfg.warmup if cfg.pp else 0)
    dev = torch.cuda.get_device_name(eng.device) if eng.device.type == "cuda" else "cpu"
    result: dict = {"meta": {"model": eng.gguf.path.name, "device": dev, "torch": torch.__version__,
                             "prompts": cfg.prompts + (" (chat template)" if cfg.chat else ""), "n_prompts": len(prompts), "max_tokens": cfg.max_tokens,
                             "reps": cfg.reps, "seed": base.seed, "config": dataclasses.asdict(cfg),
                             "sampled_chain": dataclasses.asdict(base) | {"temperature": list(cfg.temp_list)},
                             "engine": dataclasses.asdict(ecfg)}}
    with tqdm(total=total, unit="run", disable=not ecfg.progress, file=sys.stderr) as bar:
        result["rows"], result["mismatches"] = run_rows(eng, cfg, base, prompts, bar)
        if cfg.pp:
            bar.set_description(f"pp{cfg.pp}")
            result["pp"] = prefill_speed(eng, cfg.pp, prompts, cfg.reps, cfg.warmup, bar)
    if cfg.floor:
        result["floor"] = bandwidth_floor(eng, cfg.max_tokens // 2 + 64)
    result["memory"] = memory(eng)
    del eng  # free the device before llama.cpp runs
    if cfg.llama_bench:
        print("running llama-bench ...", file=sys.stderr)
        result["llama_bench"] = peers.run_llama_bench(cfg.llama_bench, model, cfg.pp, cfg.max_tokens, cfg.llama_args)
    if cfg.llama_completion:
        from .run import sampler_at

        result["llama_completion"] = {}
        for temp in cfg.temp_list:
            print(f"running llama-completion at temp {temp:g} ...", file=sys.stderr)
            result["llama_completion"][f"{temp:g}"] = peers.run_llama_completion(
                cfg.llama_completion, model, prompts, sampler_at(base, temp), temp, cfg.max_tokens, cfg.ignore_eos,
                ecfg.ctx_size, cfg.llama_args)
    for r in result["rows"]:
        r["x_llama"] = report.peer_ratio(r, result)
    if cfg.json:
        text = json.dumps(result, indent=1)
        if cfg.json == "-":
            print(text)
        else:
            with open(cfg.json, "w") as f:
                f.write(text + "\n")
    if cfg.json != "-":
        print(report.table(result))
    if cfg.plot:
        report.plot(result, cfg.plot)
    for line in result["mismatches"]:
        print(f"mtp-turbo: MISMATCH: {line}", file=sys.stderr)
    return 1 if result["mismatches"] else 0
