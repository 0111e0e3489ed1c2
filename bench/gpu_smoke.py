"""GPU smoke check on a random-weight Gemma-3-270M-shaped model (no model file needed):
captured (graph + compile) steps equal eager steps, timing of 1..5-row steps, GPU sampler equals
CPU sampler. Run: python bench/gpu_smoke.py"""

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mtp_turbo.cache.kv import KVCache  # noqa: E402
from mtp_turbo.models.arch import ModelConfig, Rope, layer_tensors
from mtp_turbo.models.decoder import Decoder  # noqa: E402
from mtp_turbo.models.step import StepRunner  # noqa: E402

cfg = ModelConfig(family="gemma3", vocab_size=262144, hidden=640, n_layers=18, n_heads=4, n_kv_heads=1, head_dim=256, ffn=2048,
                   eps=1e-6, rope_global=Rope(1e6), rope_local=Rope(1e4), sliding_window=512, sliding_pattern=6,
                   query_scale=256**-0.5, context_length=32768)
dev = torch.device("cuda")
g = torch.Generator(device="cpu").manual_seed(0)
shapes = {"q": (1024, 640), "k": (256, 640), "v": (256, 640), "o": (640, 1024), "gate": (2048, 640),
          "up": (2048, 640), "down": (640, 2048), "q_norm": (256,), "k_norm": (256,)}
W = {"token_embd.weight": torch.randn(262144, 640, generator=g) * 0.03,
     "output_norm.weight": 1 + 0.1 * torch.randn(640, generator=g)}
for i in range(cfg.n_layers):
    for k, name in layer_tensors(cfg).items():
        shp = shapes.get(k, (640,))
        W[f"blk.{i}.{name}"] = (1 + 0.1 * torch.randn(shp, generator=g)) if k.endswith("norm") else torch.randn(shp, generator=g) * 0.04


def build(compile_):
    Wd = {k: v.to(dev, torch.float32 if v.dim() == 1 else torch.bfloat16) for k, v in W.items()}
    m = Decoder(cfg, Wd, dev, torch.bfloat16)
    kv = KVCache(cfg.n_layers, 4096, 1, 256, dev, torch.bfloat16)
    return m, kv, StepRunner(m, kv, use_graphs=True, compile=compile_)


torch.manual_seed(1)
prompt = torch.randint(0, 262144, (700,), device=dev)
for compile_ in (False, True):
    m, kv, run = build(compile_)
    with torch.inference_mode():
        m.forward(prompt[:699], 0, kv)
    kv.commit(699)
    t0 = time.perf_counter()
    rows = prompt[699:700]
    lg, h = run.forward(torch.cat([rows, prompt[:3]]), 699)  # 4-row capture
    torch.cuda.synchronize()
    cap_s = time.perf_counter() - t0
    lg = lg.clone()
    with torch.inference_mode():
        le, he = m.forward(torch.cat([rows, prompt[:3]]), 699, kv)
    err = ((lg - le).abs().max() / le.abs().max()).item()
    print(f"compile={compile_}: capture {cap_s:.1f} s, graph vs eager rel err {err:.2e}, argmax equal "
          f"{torch.equal(lg.argmax(-1), le.argmax(-1))}")
    toks = torch.randint(0, 1000, (8,), device=dev)
    for T in (1, 2, 4, 5):
        for _ in range(5):
            run.forward(toks[:T], 699)
        ts = []
        for _ in range(200):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); run.forward(toks[:T], 699); e.record(); e.synchronize()
            ts.append(s.elapsed_time(e))
        print(f"   T={T}: {statistics.median(ts):.3f} ms")
    del m, kv, run
    torch.cuda.empty_cache()

from mtp_turbo.sampling.chain import sample_dist  # noqa: E402
from mtp_turbo.sampling.config import SamplerConfig  # noqa: E402
from mtp_turbo.sampling.draw import draw  # noqa: E402
from mtp_turbo.sampling.rng import uniforms  # noqa: E402

c = SamplerConfig(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, repeat_penalty=1.1, presence_penalty=0.3)
lg = torch.randn(4, 262144) * 3
toks = torch.randint(0, 262144, (300,))
pc = sample_dist(lg, toks, c)
pg = sample_dist(lg.to(dev), toks.to(dev), c).cpu()
uc = uniforms(5, torch.arange(100, 104))
ug = uniforms(5, torch.arange(100, 104, device=dev)).cpu()
print("sampler cpu vs gpu max abs diff", (pc - pg).abs().max().item(), "uniforms equal", torch.equal(uc, ug),
      "draws equal", torch.equal(draw(pc, uc), draw(pg.to(dev), ug.to(dev)).cpu()))
