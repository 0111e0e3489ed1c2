"""models/memory.py: the dense model's device bytes, the K/V cache's, and the automatic --file-weights
choice; EngineConfig's file_weights values."""

from __future__ import annotations

import math

import pytest

from mtp_turbo.engine_config import EngineConfig
from mtp_turbo.errors import ConfigError
from mtp_turbo.io.gguf_file import GGUFFile
from mtp_turbo.models.load import model_config
from mtp_turbo.models.memory import HEADROOM, WORKSPACE, dense_bytes, file_weights_needed, kv_bytes


def test_the_default_models_dense_bytes_and_kv(model_path):
    """Counted from the file's own tensor table (each tensor's elements, 2 bytes a matrix element, 4 a
    vector's) plus the Q8_0 head's codes and layout: 851.5 MiB, the figure the GPU reported loading it
    (bench/RESULTS.md session 36: weights 511.5 + codes 170.0 + layout 170.1 MiB); K/V at 4096 cells 72 MiB."""
    gf = GGUFFile(model_path)
    cfg = model_config(gf)
    table = sum(math.prod(t.shape) * (2 if len(t.shape) == 2 else 4) for t in gf.tensors.values())
    head = gf.tensors["token_embd.weight"]
    assert head.ggml_type == 8  # Q8_0, tied
    assert dense_bytes(gf, cfg) == table + 2 * head.nbytes
    assert abs(dense_bytes(gf, cfg) / 2**20 - 851.6) < 0.5
    assert kv_bytes(cfg, 4096) == 72 * 2**20
    assert kv_bytes(cfg, 10**9) == kv_bytes(cfg, cfg.context_length)  # cut to the model's context


def test_file_weights_needed_at_the_boundary():
    dense, kv = 20 << 30, 2 << 30
    fits = math.ceil((dense + kv + WORKSPACE) / HEADROOM)
    assert not file_weights_needed(dense, kv, fits)
    assert file_weights_needed(dense, kv, fits - 2)
    assert file_weights_needed(dense, kv, 8 << 30)  # a 24 GB dense copy on a GPU with 8 GiB free
    assert not file_weights_needed(1 << 30, 1 << 27, 70 << 30)


def test_engine_config_file_weights_values():
    assert EngineConfig().file_weights == "auto"
    assert EngineConfig(file_weights=True).file_weights == "on"
    assert EngineConfig(file_weights=False).file_weights == "off"
    assert EngineConfig(file_weights="off").file_weights == "off"
    with pytest.raises(ConfigError, match="file-weights must be auto, on or off"):
        EngineConfig(file_weights="yes")
