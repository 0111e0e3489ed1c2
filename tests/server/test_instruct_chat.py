"""`mtp-turbo serve` on an instruct model of another family (SmolLM2-135M-Instruct: llama, byte-level
BPE, the file's own ChatML template ending each turn with <|im_end|>), driven by the official openai
client on the CPU: a sensible answer, the turn ended by the file's stop token (not by max_tokens),
streamed the same, and n-gram drafting giving the same text."""

import pytest

from .conftest import KEY, start_server, stop_server


@pytest.fixture(scope="module")
def smol_server(smollm2_path):
    srv = start_server(smollm2_path, "--ctx-size", "256", "--api-key", KEY)
    yield srv
    stop_server(srv)


def test_instruct_model_answers_through_its_chat_template(smol_server):
    c = smol_server.client()
    assert smol_server.model == "SmolLM2-135M-Instruct.Q4_1"
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    r = c.chat.completions.create(model=smol_server.model, messages=msgs, max_tokens=40, temperature=0)
    text = r.choices[0].message.content
    assert "Paris" in text and "<|im_end|>" not in text and "<|im_start|>" not in text
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens < 40  # <|im_end|> ended the turn
    parts = list(c.chat.completions.create(model=smol_server.model, messages=msgs, max_tokens=40, temperature=0,
                                           stream=True))
    assert "".join(p.choices[0].delta.content or "" for p in parts) == text
    again = c.chat.completions.create(model=smol_server.model, messages=msgs, max_tokens=40, temperature=0,
                                      extra_body={"draft": "ngram", "draft_tokens": 3})
    assert again.choices[0].message.content == text
