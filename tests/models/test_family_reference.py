"""The real Llama-family and Qwen2 files (SmolLM2-135M-Instruct Q4_1, Qwen2.5-Coder-0.5B-Instruct
Q4_K_M, from the model registry) against transformers' own GGUF loader (its dequantization, its
q/k permutation, its LlamaForCausalLM / Qwen2ForCausalLM) in fp32 on the CPU: logits of varied
prompts, fed in one chunk and as chunks + one-row steps, and greedy continuations, token for token.
Prompt ids come from transformers' tokenizer, so this checks the model path alone
(tests/io/test_bpe_tokenizer.py checks our tokenizer against it)."""

import pytest
import torch

from mtp_turbo.sampling.config import SamplerConfig

transformers = pytest.importorskip("transformers")

PROMPTS = [
    "def quicksort(xs):\n    if len(xs) <= 1:\n        return xs\n",
    "The history of the Roman Empire begins with",
    "<|im_start|>user\nWhat is 17 * 23?<|im_end|>\n<|im_start|>assistant\n",
]


def _rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.fixture(scope="module", params=["smollm2", "qwen05"])
def pair(request):
    from mtp_turbo.engine import Engine, EngineConfig

    path = request.getfixturevalue(f"{request.param}_path")
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                           dtype=torch.float32).eval()
    eng = Engine(EngineConfig(model=str(path), device="cpu", ctx_size=512, progress=False, cpu_weights="f32"))
    yield tok, hf, eng
    del hf, eng


@pytest.mark.slow
def test_logits_and_greedy_text_match_transformers(pair):
    tok, hf, eng = pair
    for prompt in PROMPTS:
        ids = tok(prompt)["input_ids"]
        with torch.no_grad():
            ref = hf(torch.tensor([ids])).logits[0].float()
        ours = eng.forward_logits(ids, chunk=len(ids))
        assert _rel_err(ours, ref) < 1e-4, (prompt, _rel_err(ours, ref))
        streamed = eng.forward_logits(ids, chunk=5, tail_single=3)
        assert _rel_err(streamed, ref) < 1e-4
        assert torch.equal(ours.argmax(-1), ref.argmax(-1))
        with torch.no_grad():
            want = hf.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
        eng.reset()
        got = eng.generate_ids(ids, sampler=SamplerConfig(temperature=0.0), max_tokens=12, stop_ids=())
        # transformers stops at the model's end of turn; we were told not to: compare what it made
        assert len(want) >= 4 and got[:len(want)] == want, (prompt, got, want)
