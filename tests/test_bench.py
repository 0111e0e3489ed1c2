"""`mtp-turbo bench`: llama.cpp's outputs parsed (fixtures captured from real runs), its tools run
as subprocesses with the flags of our sampler chain, the rows' text checks (a drafter that changes
the text is reported, a bug), the table/JSON/plot, and one tiny real run on the CPU."""

import dataclasses
import json
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from mtp_turbo.benchmark import peers, report
from mtp_turbo.benchmark.config import BenchConfig, load_prompts
from mtp_turbo.benchmark.run import aggregate, run_rows
from mtp_turbo.cli import main
from mtp_turbo.errors import ConfigError, MtpTurboError
from mtp_turbo.sampling.config import SamplerConfig

DATA = Path(__file__).parent / "data"


def test_llama_bench_json_is_parsed():
    r = peers.parse_llama_bench((DATA / "llama_bench_cpu.json").read_text())
    assert r["pp"]["name"] == "pp64" and r["pp"]["tps"] == pytest.approx(51.37532)
    assert r["tg"]["name"] == "tg16" and r["tg"]["tps"] == pytest.approx(1.383726)
    assert r["build"] == "0c1e570" and r["backends"] == "CPU"
    with pytest.raises(MtpTurboError, match="no pp or tg"):
        peers.parse_llama_bench("[]")


def test_llama_completion_timings_are_parsed():
    t = peers.parse_completion_timings((DATA / "llama_completion_cpu.stderr").read_text())
    assert t == {"prompt_ms": 2163.74, "prompt_tokens": 6, "eval_ms": 7122.55, "eval_tokens": 7}
    older = ("llama_perf_context_print: prompt eval time =      23.10 ms /     5 tokens (    4.62 ms per token)\n"
             "llama_perf_context_print:        eval time =    1163.21 ms /   127 runs   (    9.16 ms per token)\n")
    assert peers.parse_completion_timings(older)["eval_tokens"] == 127
    with pytest.raises(MtpTurboError, match="no timings"):
        peers.parse_completion_timings("load time = 3 ms")


def _fake_tool(tmp_path, name, stdout_file=None, stderr_file=None, exit_code=0) -> str:
    """An executable that records its arguments and prints a captured output."""
    p = tmp_path / name
    lines = [f"#!{sys.executable}", "import sys, json",
             f"open({str(tmp_path / (name + '.args'))!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')"]
    if stdout_file:
        lines.append(f"sys.stdout.write(open({str(stdout_file)!r}).read())")
    if stderr_file:
        lines.append(f"sys.stderr.write(open({str(stderr_file)!r}).read())")
    lines.append(f"sys.exit({exit_code})")
    p.write_text("\n".join(lines) + "\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def test_llama_tools_run_with_our_settings(tmp_path):
    lb = _fake_tool(tmp_path, "llama-bench", stdout_file=DATA / "llama_bench_cpu.json")
    r = peers.run_llama_bench(lb, "m.gguf", 512, 128, "-ngl 99")
    args = json.loads((tmp_path / "llama-bench.args").read_text())
    assert args == ["-m", "m.gguf", "-fa", "1", "-p", "512", "-n", "128", "-o", "json", "-ngl", "99"]
    assert r["tg"]["tps"] == pytest.approx(1.383726)

    lc = _fake_tool(tmp_path, "llama-completion", stderr_file=DATA / "llama_completion_cpu.stderr")
    s = SamplerConfig(temperature=0.6, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.08, presence_penalty=0.4,
                      penalty_last_n=64, seed=5)
    r = peers.run_llama_completion(lc, "m.gguf", ["first prompt", "second\nprompt"], s, 0.6, 32, True, 1024)
    runs = [json.loads(line) for line in (tmp_path / "llama-completion.args").read_text().splitlines()]
    assert len(runs) == 2 and r["decode_tps"] == pytest.approx(2 * 7 / (2 * 7122.55) * 1e3)
    a = runs[0]
    flag = {a[i]: a[i + 1] for i in range(len(a) - 1) if a[i].startswith("-")}
    assert flag["--temp"] == "0.6" and flag["--top-k"] == "40" and flag["--repeat-penalty"] == "1.08"
    assert flag["--presence-penalty"] == "0.4" and flag["--repeat-last-n"] == "64" and flag["-s"] == "5"
    assert flag["--samplers"] == "top_k;penalties;temperature;min_p;top_p" and flag["-n"] == "32"
    assert "--ignore-eos" in a and "--no-escape" in a and "-no-cnv" in a
    broken = _fake_tool(tmp_path, "broken", stderr_file=DATA / "llama_completion_cpu.stderr", exit_code=3)
    with pytest.raises(MtpTurboError, match="broken exited with 3: .*graphs reused"):
        peers.run_llama_bench(broken, "m.gguf", 1, 1)
    with pytest.raises(MtpTurboError, match="failed to run"):
        peers.run_llama_bench(str(tmp_path / "llama-bench.args"), "m.gguf", 1, 1)  # not executable


def test_config_checks_and_prompt_sets(tmp_path):
    cfg = BenchConfig(modes="plain,ngram", temps="0,0.6", draft_tokens="1,3")
    assert cfg.mode_list == ("none", "ngram") and cfg.temp_list == (0.0, 0.6) and cfg.k_list == (1, 3)
    for bad, word in [(dict(modes="plain,magic"), "modes"), (dict(temps="-1"), "temps"), (dict(draft_tokens="9"),
                      "draft-tokens"), (dict(draft_tokens="1.5"), "draft-tokens"), (dict(reps=0), "reps"),
                      (dict(prompts="nope.txt"), "prompts"), (dict(llama_bench="/no/such"), "llama-bench"),
                      (dict(plot="/no/such/dir/x.png"), "plot"), (dict(modes="plain,auto"), "modes"),
                      (dict(modes="plain,model"), "draft-model"), (dict(draft_model="x.gguf"), "draft-model")]:
        with pytest.raises(ConfigError, match=word):
            BenchConfig(**bad)
    assert BenchConfig(modes="plain,model", draft_model="qwen2.5-coder-0.5b-instruct").mode_list == ("none", "model")
    mt = load_prompts("mtbench", 3)
    assert len(mt) == 3 and mt[0].startswith("Compose an engaging travel blog post")
    assert load_prompts("humaneval", 1)[0].startswith("from typing import List")
    (tmp_path / "p.txt").write_text("one\n\ntwo\n")
    (tmp_path / "p.json").write_text(json.dumps(["a", "b", "c"]))
    assert load_prompts(str(tmp_path / "p.txt"), 5) == ["one", "two"] and load_prompts(str(tmp_path / "p.json"), 2) == ["a", "b"]


class ScriptedEngine:
    """Greedy text = the prompt's length in tokens; a drafter named 'ngram' changes token 2 at k=3;
    at k=2 the short prompt decodes in half plain's time, the long one in 1.5x (same total)."""

    def __init__(self):
        self.tokens = []
        self.shapes = set()  # (k, tokens) seen: a new one "captures a graph", as a first use does

    def reset(self):
        self.tokens = []

    def generate(self, prompt, sampler, max_tokens, spec, stop_ids):
        ids = [len(prompt)] * max_tokens
        shape = (None if spec is None else spec.draft_tokens, max_tokens)
        captures = int(shape not in self.shapes)
        self.shapes.add(shape)
        if spec is not None and spec.draft_tokens == 3:
            ids[2] += 1
        rounds = 0 if spec is None else max_tokens // 2
        sp = None if spec is None else SimpleNamespace(rounds=rounds, drafted=rounds * 2, accepted=rounds, emitted=max_tokens,
                                                       round_s=0.8, host_s=0.05, draft_s=0.1, verify_s=0.5, accept_s=0.1,
                                                       k_counts={spec.draft_tokens: rounds - 1, 0: 1})
        self.last_stats = SimpleNamespace(prompt_tokens=10, prompt_cached=0, prompt_s=0.5, gen_tokens=max_tokens,
                                          decode_s=1.0 if spec is None or spec.draft_tokens != 2
                                          else 0.5 if len(prompt) < 3 else 1.5, spec=sp, captures=captures)
        yield SimpleNamespace(token_ids=tuple(ids))


def test_rows_and_their_text_checks():
    bar = SimpleNamespace(update=lambda *a: None, set_description=lambda *a: None)
    cfg = BenchConfig(modes="ngram,plain", temps="0,0.6", draft_tokens="2,3", max_tokens=8, n_prompts=2, reps=2)
    rows, mismatches = run_rows(ScriptedEngine(), cfg, SamplerConfig(), ["ab", "abcd"], bar)
    assert [(r["mode"], r["k"], r["temp"]) for r in rows] == [
        ("plain", None, 0.0), ("ngram", 2, 0.0), ("ngram", 3, 0.0), ("plain", None, 0.6), ("ngram", 2, 0.6),
        ("ngram", 3, 0.6)]
    assert [r["same_text"] for r in rows] == [True, True, False, True, True, False]
    assert len(mismatches) == 4 and "ngram k=3 temp=0: prompt 0 differs from plain temp=0 at token 2" in mismatches[0]
    r = rows[1]
    assert r["runs"] == 4 and r["decode_tps"] == 8.0 and r["prompt_tps"] == 20.0 and r["tokens_per_round"] == 2.0
    assert r["acceptance"] == 0.5 and r["split"] == pytest.approx({"draft": 0.1, "verify": 0.5, "accept": 0.1,
                                                                   "device": 0.75, "host": 0.05, "other": 0.2})
    assert "split" not in rows[0] and rows[0]["tokens_per_round"] == 1.0
    assert r["k_counts"] == {0: 4, 2: 12} and "k_counts" not in rows[0]  # rounds per k, summed over the runs
    # the slowest prompt against plain's same prompt: the long one, 2 s of plain over 3 s
    assert r["worst_prompt"] == {"prompt": 1, "ratio": pytest.approx(2 / 3)}
    assert rows[2]["worst_prompt"] == {"prompt": 0, "ratio": 1.0} and "worst_prompt" not in rows[0]


def test_warmup_leaves_no_capture_to_the_timed_runs():
    # the warm-up generates each prompt exactly as the timed runs will (here 20 tokens: more than a
    # short warm-up would), so no timed run meets a shape for the first time; without it they do,
    # and the table says so
    bar = SimpleNamespace(update=lambda *a: None, set_description=lambda *a: None)
    cfg = BenchConfig(modes="ngram,plain", temps="0", draft_tokens="3", max_tokens=20, n_prompts=1, reps=1)
    rows, _ = run_rows(ScriptedEngine(), cfg, SamplerConfig(), ["ab"], bar)
    assert [r["captures"] for r in rows] == [0, 0]
    cold = dataclasses.replace(cfg, warmup=False)
    rows, _ = run_rows(ScriptedEngine(), cold, SamplerConfig(), ["ab"], bar)
    assert [r["captures"] for r in rows] == [1, 1]
    meta = dict(model="m", device="cuda", torch="2", prompts="mtbench", n_prompts=1, max_tokens=20, reps=1, seed=0)
    text = report.table({"meta": meta, "rows": rows, "mismatches": []})
    assert "CUDA graphs captured inside timed runs (first-use cost in their decode time): plain T=0: 1, ngram k=3 T=0: 1" in text


def test_table_and_plot(tmp_path):
    rows = [aggregate("none", None, 0.0, [dict(prompt_tokens=10, prompt_cached=0, prompt_s=1.0, gen_tokens=100,
                                               decode_s=1.0)], True),
            aggregate("mtp", 3, 0.0, [dict(prompt_tokens=10, prompt_cached=0, prompt_s=1.0, gen_tokens=100,
                                           decode_s=0.5, rounds=40, drafted=120, accepted=60, emitted=100,
                                           round_s=0.45, host_s=0.05)], False)]
    rows[1]["worst_prompt"] = {"prompt": 4, "ratio": 0.97}
    result = {"meta": dict(model="m.gguf", device="cpu", torch="2", prompts="mtbench", n_prompts=1, max_tokens=100,
                           reps=1, seed=0), "rows": rows, "mismatches": ["mtp k=3 temp=0: prompt 0 differs"],
              "llama_bench": {"tg": {"name": "tg128", "tps": 50.0, "std": 1.0}, "pp": {"name": "pp512", "tps": 10.0}},
              "pp": {"name": "pp512", "tps": 20.0, "n": 512},
              "floor": {"weight_bytes": 2**20, "kv_bytes": 0, "context": 64, "bandwidth_GBps": 1.0,
                        "ms_per_token": 1.0, "tps": 400.0, "head": "q8_0"},
              "memory": {"weights_MiB": 511.5, "head_q8_MiB": 170.0, "head_layout_MiB": 170.1, "kv_MiB": 72.0,
                         "allocated_MiB": 800.0, "peak_allocated_MiB": 900.0, "reserved_MiB": 1024.0}}
    t = report.table(result)
    assert ("memory: weights 511.5 MiB + the head's Q8_0 codes 170.0 + their frag8 layout 170.1, K/V cache 72.0 MiB; "
            "device allocated 800 MiB (peak 900, reserved 1024)") in t
    assert "bandwidth floor: 1.0 MiB a plain step (weights 1.0, the LM head as Q8_0, K/V at 64 cells 0.0)" in t
    assert "| plain | - | 0 | 100.0 | 10.0 | 1.00 | - | - | - | - | - | - | - | yes | - | 2.00 | 25% |" in t
    assert "| mtp | 3 | 0 | 200.0 | 10.0 | 2.50 | 50% | 80% | - | - | - | 10% | 10% | **NO** | 0.97x (#4) | 4.00 | 50% |" in t
    assert "pp512: 20.0 tok/s | llama-bench pp512: 10.0 tok/s, ratio 2.00" in t and "plain greedy ratio 2.00" in t
    assert "MISMATCH" in t
    pytest.importorskip("matplotlib")
    report.plot(result, str(tmp_path / "b.png"))
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_floor_counts_each_byte_a_plain_step_reads_once(monkeypatch):
    # against the file's tensors, each counted once by its own size: the model holds q / k / v and
    # gate / up fused, as views of per-kind stacked storages (counted twice, the floor was 668 MB
    # for 536 on Gemma-3-270M); with the step's Q8_0 head, the codes + scales and one embedding row
    # instead of the dense embedding. The head's frag8 layout is in the memory line, not the floor
    import torch

    from mtp_turbo.benchmark import run
    from mtp_turbo.models.arch import ModelConfig, Rope, layer_tensors
    from mtp_turbo.models.decoder import Decoder
    from mtp_turbo.quant.kernels.frag8 import counters, for_weight8
    from mtp_turbo.quant.repack import PackedWeight

    V, D, DH, F, n_layers, window = 200, 64, 32, 96, 4, 16
    cfg = ModelConfig(family="gemma3", vocab_size=V, hidden=D, n_layers=n_layers, n_heads=2, n_kv_heads=1, head_dim=DH,
                      ffn=F, eps=1e-6, rope_global=Rope(1e6), rope_local=Rope(1e4), sliding_window=window,
                      sliding_pattern=2, query_scale=DH ** -0.5, context_length=128)
    shapes = {"attn_norm": (D,), "q": (2 * DH, D), "k": (DH, D), "v": (DH, D), "q_norm": (DH,), "k_norm": (DH,),
              "o": (D, 2 * DH), "post_attn_norm": (D,), "ffn_norm": (D,), "gate": (F, D), "up": (F, D),
              "down": (D, F), "post_ffn_norm": (D,)}
    w = {f"blk.{i}.{name}": torch.ones(shapes[k]) if k.endswith("norm") else torch.randn(shapes[k]).bfloat16()
         for i in range(n_layers) for k, name in layer_tensors(cfg).items()}
    pw = PackedWeight.from_dense(torch.randn(V, D), "q8_0")
    w |= {"output_norm.weight": torch.ones(D), "token_embd.weight": pw.dequantize().bfloat16()}
    file_bytes = {n: t.numel() * t.element_size() for n, t in w.items()}
    layers = sum(file_bytes.values()) - file_bytes["token_embd.weight"]
    m = Decoder(cfg, w, "cpu", torch.bfloat16, head_q8=(pw.qs, pw.scales))
    kv = SimpleNamespace(**{n: torch.zeros(2, 8, 1, DH, dtype=torch.bfloat16) for n in ("k", "v")})
    monkeypatch.setattr(run, "copy_bandwidth", lambda dev: 1.0)  # GB/s
    context = 40
    kv_bytes = sum(2 * DH * 2 * (context if cfg.is_global(i) else window) for i in range(n_layers))
    for q8 in (False, True):
        runner = SimpleNamespace(fused=SimpleNamespace(head_w=m.head_packed() if q8 else None))
        eng = SimpleNamespace(model=m, kv=kv, device=torch.device("cpu"), runner=runner)
        head = pw.qs.nbytes + pw.scales.nbytes + D * 2 if q8 else file_bytes["token_embd.weight"]
        f = run.bandwidth_floor(eng, context)
        assert (f["weight_bytes"], f["kv_bytes"], f["head"]) == (layers + head, kv_bytes, "q8_0" if q8 else "dense")
        assert f["tps"] == pytest.approx(1e9 / (layers + head + kv_bytes))
    assert run.bandwidth_floor(SimpleNamespace(model=m, kv=kv, device=torch.device("cpu")), context)["head"] == "dense"
    fw = for_weight8(m.head_packed())  # what the fused step builds: counted as held, with its counters
    mem = run.memory(eng)
    assert mem["head_q8_MiB"] * 2**20 == pw.qs.nbytes + pw.scales.nbytes
    assert mem["head_layout_MiB"] * 2**20 == fw.qf.nbytes + fw.sf.nbytes + counters(m.head_packed()).nbytes


def test_tiny_bench_on_the_cpu(capsys, tmp_path, model_path):
    rc = main(["bench", "--model", str(model_path), "--device", "cpu", "--ctx-size", "160", "--no-progress",
               "--modes", "plain,ngram", "--temps", "0,0.7", "--draft-tokens", "2", "--max-tokens", "3",
               "--n-prompts", "1", "--pp", "16", "--no-warmup", "--json", str(tmp_path / "b.json")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    res = json.loads((tmp_path / "b.json").read_text())
    assert [(r["mode"], r["temp"]) for r in res["rows"]] == [("plain", 0), ("ngram", 0), ("plain", 0.7), ("ngram", 0.7)]
    assert all(r["same_text"] and r["gen_tokens"] == 3 and r["decode_tps"] > 0 for r in res["rows"])
    assert res["mismatches"] == [] and res["pp"]["tps"] > 0 and res["meta"]["sampled_chain"]["repeat_penalty"] == 1.08
    assert "| plain | - | 0.7 |" in out and "prompt pp16:" in out
    mem = res["memory"]  # the CPU keeps no Q8_0 codes (the fused head is CUDA's)
    assert mem["head_q8_MiB"] == 0 and mem["kv_MiB"] > 0 and mem["peak_rss_MiB"] > mem["weights_MiB"] > 100
    assert f"memory: weights {mem['weights_MiB']:.1f} MiB, K/V cache" in out


def test_chat_sends_each_prompt_through_the_models_template(capsys, tmp_path, smollm2_path, monkeypatch):
    from mtp_turbo.benchmark import run

    seen, real = [], run.generate
    monkeypatch.setattr(run, "generate", lambda eng, prompt, *a: seen.append(prompt) or real(eng, prompt, *a))
    rc = main(["bench", "--model", str(smollm2_path), "--device", "cpu", "--ctx-size", "256", "--no-progress",
               "--modes", "plain", "--temps", "0", "--max-tokens", "2", "--n-prompts", "1", "--pp", "0",
               "--no-warmup", "--prompts", "humaneval", "--chat", "--json", str(tmp_path / "b.json")])
    assert rc == 0, capsys.readouterr().err
    res = json.loads((tmp_path / "b.json").read_text())
    assert res["meta"]["prompts"] == "humaneval (chat template)"
    assert seen and all(p.startswith("<|im_start|>") and "<|im_start|>user\nfrom typing import" in p
                        and p.endswith("<|im_start|>assistant\n") for p in seen), seen[:1]
