import torch
from mtp_turbo.io.gguf_file import GGUFFile
from mtp_turbo.models.load import load_model
from mtp_turbo.cache.kv import KVCache
from mtp_turbo.models import fused
gf = GGUFFile("/tmp/g4b2.gguf")
frag = load_model(gf, "cpu", torch.float32, progress=False, file_weights=True, frag=True)
dense = load_model(gf, "cpu", torch.float32, progress=False)
cfg = dense.cfg
toks = torch.tensor([5, 17, 300, 2, 999, 64])
kv = KVCache(2, 64, cfg.n_kv_heads, cfg.head_dim, "cpu", torch.float32)
ref = dense.forward(toks, 0, kv)[0]
kv2 = KVCache(2, 64, cfg.n_kv_heads, cfg.head_dim, "cpu", torch.float32)
dec = fused.FusedDecoder(frag, kv2, prefill_rows=16)
l1 = dec.forward(toks[:2], torch.arange(2))[0].clone()
l2 = dec.forward(toks[2:6], torch.arange(2, 6))[0].clone()
got = torch.cat([l1, l2])
print("rel", ((got - ref).abs().max() / ref.abs().max()).item(), "argmax agree", (got.argmax(-1) == ref.argmax(-1)).float().mean().item())
import torch, time
from mtp_turbo.io.gguf_file import GGUFFile
from mtp_turbo.models.load import load_model
from mtp_turbo.cache.kv import KVCache
from mtp_turbo.models import fused
t0=time.time()
gf = GGUFFile("/tmp/g4b2.gguf")
frag = load_model(gf, "cpu", torch.float32, progress=False, file_weights=True, frag=True)
dense = load_model(gf, "cpu", torch.float32, progress=False)
cfg = dense.cfg
toks = torch.tensor([5, 17, 300, 2, 999, 64, 7, 8, 9, 10, 11, 12, 13])
kv = KVCache(2, 64, cfg.n_kv_heads, cfg.head_dim, "cpu", torch.float32)
ref = dense.forward(toks, 0, kv)[0]
kv2 = KVCache(2, 64, cfg.n_kv_heads, cfg.head_dim, "cpu", torch.float32)
dec = fused.FusedDecoder(frag, kv2, prefill_rows=16)
dec.forward(toks[:12], torch.arange(12), head=False)   # 12 rows: the prefill GEMM
l = dec.forward(toks[12:13], torch.arange(12, 13))[0].clone()
print("after a GEMM chunk: rel", ((l - ref[12:]).abs().max() / ref[12:].abs().max()).item(),
      "K rel", ((kv2.k[:, :12] - kv.k[:, :12]).abs().max() / kv.k[:, :12].abs().max()).item(), time.time()-t0)
