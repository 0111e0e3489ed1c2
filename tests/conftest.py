"""Shared fixtures: the default model file and one CPU engine per test session (loading is the
expensive part, so every test that needs the real model shares it)."""

import os

import pytest
import torch

# Without CUDA, Triton kernels run in Triton's interpreter (numpy on the CPU). The switch must be
# set before anything imports triton, hence here, at collection time.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_addoption(parser):
    parser.addoption("--model-path", default=None,
                     help="GGUF for the real-model tests (default: the packaged Gemma-3-270M; the GPU host "
                     "has no registry access, so its session passes the carried file)")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (run on the device machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def model_path(request):
    from pathlib import Path

    from mtp_turbo.io.gguf_file import default_model_path

    given = request.config.getoption("--model-path")
    return Path(given) if given else default_model_path()


@pytest.fixture(scope="session")
def engine(model_path):
    from mtp_turbo.engine import Engine, EngineConfig

    # f32: the file's dequantized values, the reference the tests compare with transformers and llama.cpp
    # (tests/models/test_cpu_int8.py and tests/quant/test_cpu_int4.py check the CPU's int8 and 4-bit matrices against it)
    return Engine(EngineConfig(model=str(model_path), device="cpu", ctx_size=2048, progress=False, cpu_weights="f32"))


@pytest.fixture(scope="session")
def greedy_agrees_where_clear():
    """check(ref_engine, engine, prompt): engine's greedy tokens are ref_engine's up to the first position
    where ref_engine's top two logits lie within `margin` (the quantized weights' error): there the two
    may part."""
    from mtp_turbo.sampling.config import SamplerConfig

    greedy = SamplerConfig(temperature=0.0)

    def check(ref_engine, engine, prompt: str, margin: float = 0.5, max_tokens: int = 24) -> None:
        ref = ref_engine.generate_ids(prompt, sampler=greedy, max_tokens=max_tokens, stop_ids=())
        ref_engine.reset()
        got = engine.generate_ids(prompt, sampler=greedy, max_tokens=max_tokens, stop_ids=())
        engine.reset()
        ids = ref_engine.tokenizer.encode(prompt) + ref
        logits = ref_engine.forward_logits(ids, chunk=len(ids))[len(ids) - len(ref) - 1: -1]
        top2 = logits.topk(2, dim=-1).values
        close = (top2[:, 0] - top2[:, 1] < margin).nonzero()
        n = int(close[0]) if len(close) else len(ref)
        assert got[:n] == ref[:n], (prompt, n, got, ref)

    return check


def _registry_model(name):
    """A registry model's file; not installed is a failure (not a skip) that says how to install it."""
    from mtp_turbo.errors import ModelFileError
    from mtp_turbo.io.registry import resolve_model

    try:
        return resolve_model(name)
    except ModelFileError as e:
        problem = str(e)  # failed outside the except: no "during handling" chain in the report
    pytest.fail(f"{problem} (the README's test command installs it)", pytrace=False)


@pytest.fixture(scope="session")
def smollm2_path():
    return _registry_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def qwen05_path():
    return _registry_model("qwen2.5-coder-0.5b-instruct")


@pytest.fixture(scope="session")
def qwen15_path():  # GPU tests only (the README's install does not fetch it)
    return _registry_model("qwen2.5-coder-1.5b-instruct")
