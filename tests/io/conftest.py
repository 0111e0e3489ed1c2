"""Shared fixtures for the io tests: the default model, opened once per session by each reader."""

import pytest


@pytest.fixture(scope="session")
def model_path():
    from mtp_turbo.io.gguf_file import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def model(model_path):
    from mtp_turbo.io.gguf_file import GGUFFile

    return GGUFFile(model_path)


@pytest.fixture(scope="session")
def reference_reader(model_path):
    """gguf.GGUFReader's full scan (slow, ~15 s): the reference our reader is checked against."""
    import gguf

    return gguf.GGUFReader(model_path)
