"""The command line: bad input gives one line naming the problem and a non-zero exit, never a
traceback; the commands run on the real model."""

import dataclasses

import numpy as np
import pytest

from mtp_turbo.cli import main
from mtp_turbo.errors import ModelFileError


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(err: str, *words):
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("mtp-turbo: error:"), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])


def test_missing_model(capsys, tmp_path):
    rc, _, err = run(capsys, "generate", "hi", "--model", str(tmp_path / "nope.gguf"), "--device", "cpu")
    assert rc != 0
    one_line_error(err, "nope.gguf")


def test_not_gguf(capsys, tmp_path):
    p = tmp_path / "model.gguf"
    p.write_text("this is a text file, not a model\n" * 10)
    rc, _, err = run(capsys, "info", "--model", str(p))
    assert rc != 0
    one_line_error(err, "not a GGUF")


def test_truncated_gguf(capsys, tmp_path, model_path):
    p = tmp_path / "cut.gguf"
    with open(model_path, "rb") as f:
        p.write_bytes(f.read(3_000_000))
    rc, _, err = run(capsys, "generate", "hi", "--model", str(p), "--device", "cpu")
    assert rc != 0
    one_line_error(err, "truncated")


def test_unsupported_architecture(capsys, tmp_path):
    from mtp_turbo.io.gguf_write import write_gguf

    p = tmp_path / "llama.gguf"
    emb = np.zeros((8, 32), dtype=np.float32)
    write_gguf(p, "llama", {"llama.context_length": 64}, {"token_embd.weight": (emb.view(np.uint8).ravel(), 0, (8, 32))})
    rc, _, err = run(capsys, "generate", "hi", "--model", str(p), "--device", "cpu")
    assert rc != 0
    one_line_error(err, "unsupported architecture", "llama")


def test_unsupported_tensor_type(model_path):
    from mtp_turbo.io.gguf_file import GGUFFile
    from mtp_turbo.models.load import load_gemma3

    gf = GGUFFile(model_path)
    name = "blk.3.ffn_up.weight"
    gf.tensors[name] = dataclasses.replace(gf.tensors[name], ggml_type=16)  # IQ2_XXS
    with pytest.raises(ModelFileError, match="blk.3.ffn_up.weight.*IQ2_XXS"):
        load_gemma3(gf, device=__import__("torch").device("cpu"), progress=False)


@pytest.mark.parametrize("flags,words", [
    (["--top-p", "1.5"], ["top-p"]),
    (["--top-p", "0"], ["top-p"]),
    (["--temperature", "-0.1"], ["temperature"]),
    (["--min-p", "2"], ["min-p"]),
    (["--top-k", "-3"], ["top-k"]),
    (["--repeat-penalty", "0"], ["repeat-penalty"]),
    (["--penalty-last-n", "-2"], ["penalty-last-n"]),
    (["--order", "top_k,bogus"], ["order"]),
    (["--draft", "magic"], ["draft"]),
    (["--draft-tokens", "0"], ["draft-tokens"]),
    (["--draft-sink", "2000"], ["draft-sink"]),
    (["--max-tokens", "-1"], ["max-tokens"]),
    (["--ctx-size", "4"], ["ctx-size"]),
])
def test_bad_flags(capsys, flags, words, model_path):
    rc, _, err = run(capsys, "generate", "hi", "--device", "cpu", "--model", str(model_path), *flags)
    assert rc != 0
    one_line_error(err, *words)


def test_prompt_longer_than_context(capsys, model_path):
    rc, _, err = run(capsys, "generate", "word " * 100, "--ctx-size", "32", "--device", "cpu",
                     "--model", str(model_path), "--no-progress")
    assert rc != 0
    one_line_error(err, "context")


def test_generate_and_info(capsys, model_path):
    rc, out, err = run(capsys, "generate", "The capital of France is", "-n", "6", "--temperature", "0",
                       "--device", "cpu", "--stats", "--no-progress", "--draft", "ngram")
    assert rc == 0 and len(out.strip()) > 0
    assert "tok/s" in err and "tokens/round" in err
    rc, out, _ = run(capsys, "info")
    assert rc == 0 and "gemma3" in out and "Q4_K" in out


def test_help_explains(capsys):
    with pytest.raises(SystemExit) as e:
        main(["generate", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--temperature", "--top-k", "--repeat-penalty", "--seed", "--draft", "--spec-sample", "LOSSY",
                 "--prefill-chunk", "--device"):
        assert flag in out
