"""The command line: bad input gives one line naming the problem and a non-zero exit, never a
traceback; the commands run on the real model."""

import dataclasses

import numpy as np
import pytest

from mtp_turbo.cli import main
from mtp_turbo.errors import ModelFileError


@pytest.fixture(autouse=True)
def no_local_server(tmp_path, monkeypatch):
    """generate here runs in-process: a `mtp-turbo serve` of the user's own is not found (client.py)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))


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

    p = tmp_path / "mamba.gguf"
    emb = np.zeros((8, 32), dtype=np.float32)
    write_gguf(p, "mamba", {"mamba.context_length": 64}, {"token_embd.weight": (emb.view(np.uint8).ravel(), 0, (8, 32))})
    rc, _, err = run(capsys, "generate", "hi", "--model", str(p), "--device", "cpu")
    assert rc != 0
    one_line_error(err, "unsupported architecture", "mamba", "gemma3, llama, qwen2")


def test_unsupported_tensor_type(model_path):
    from mtp_turbo.io.gguf_file import GGUFFile
    from mtp_turbo.models.load import load_model

    gf = GGUFFile(model_path)
    name = "blk.3.ffn_up.weight"
    gf.tensors[name] = dataclasses.replace(gf.tensors[name], ggml_type=16)  # IQ2_XXS
    with pytest.raises(ModelFileError, match="blk.3.ffn_up.weight.*IQ2_XXS"):
        load_model(gf, device=__import__("torch").device("cpu"), progress=False)


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
    (["--draft-tokens", "8"], ["draft-tokens"]),  # 0 is auto
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


# ---- the first hour: help, defaults, checks before the model loads, chat, sessions -------------------
def test_help_loads_no_torch():
    """`mtp-turbo --help` and the commands whose modules need no torch start without importing it."""
    import subprocess
    import sys

    code = ("import sys\nfrom mtp_turbo.cli import main\n"
            "for argv in (['--help'], ['check', '--help'], ['check', 'cells', '--help'], ['info', '--help'],"
            " ['train-data', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit as e:\n        assert e.code == 0, argv\n"
            "print('TORCH', 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "generate" in r.stdout and "train-mtp" in r.stdout and "cells" in r.stdout
    assert r.stdout.strip().endswith("TORCH False")


def test_console_script_flushes_output_and_returns_the_code():
    """The console script (cli.run) ends the process without the interpreter's teardown: what was
    printed arrives, and the exit code is main's (0, or 1 with the error's message)."""
    import subprocess
    import sys

    def script(*argv):
        code = "import sys\nfrom mtp_turbo.cli import run\nsys.argv = ['mtp-turbo', *sys.argv[1:]]\nrun()\n"
        return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)

    r = script("models")
    assert r.returncode == 0, r.stderr
    assert "gemma" in r.stdout.lower()
    r = script("generate", "hi", "--max-tokens", "-1", "--no-server")
    assert r.returncode == 1 and "max-tokens must be >= 0" in r.stderr


def _option_help(text: str) -> dict[str, str]:
    """--flag -> its help text (the lines of its block, joined)."""
    out, name = {}, None
    for line in text.splitlines():
        s = line.strip()
        if line.startswith("  -") and s.startswith("-"):
            name = s.split()[0].rstrip(",")
            out[name] = s
        elif name and line.startswith("    "):
            out[name] += " " + s
        else:
            name = None
    return out


def test_help_shows_each_default_once(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    opts = _option_help(capsys.readouterr().out)
    assert len(opts) > 35
    for flag, h in opts.items():
        assert h.count("(default") <= 1, (flag, h)
    assert opts["--cuda-graphs"].endswith("(default: on)") and opts["--draft-coupling"].endswith("(default: off)")
    assert "(default: 4096)" in opts["--ctx-size"] and "(default: 0.95)" in opts["--top-p"]
    assert "(default: Gemma-3-270M" in opts["--model"] and "None" not in opts["--model"]
    assert "(default: top_k,penalties,temperature,min_p,top_p)" in opts["--order"]
    assert "(default" not in opts["--chat"] and "(default" not in opts["--stats"]


def test_train_flags_are_their_config_fields(capsys):
    """train-mtp / train-data: one documented flag per TrainConfig / DataConfig field, same defaults."""
    from mtp_turbo.cli import build_parser, config_from_args
    from mtp_turbo.train.data import DataConfig
    from mtp_turbo.train.config import TrainConfig

    for cmd, cls in (("train-mtp", TrainConfig), ("train-data", DataConfig)):
        argv = [cmd, "--data", "d.npy", "--out", "h.gguf"] if cmd == "train-mtp" else [cmd, "--out", "d.npy"]
        parser = build_parser(argv)
        sub = next(a for a in parser._actions if a.dest == "command").choices[cmd]
        helps = {a.dest: a.help for a in sub._actions}
        for f in dataclasses.fields(cls):
            assert helps.get(f.name), (cmd, f.name)
        assert config_from_args(cls, parser.parse_args(argv)) == cls()
    args = build_parser(["train-mtp"]).parse_args(["train-mtp", "--data", "d", "--out", "o", "--gen-temps", "0.5",
                                                   "--accept-weight", "0.2"])
    tc = config_from_args(TrainConfig, args)
    assert tc.gen_temps == "0.5" and tc.accept_weight == 0.2


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if the command loads the weights."""
    def boom(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("mtp_turbo.engine.Engine", boom)
    monkeypatch.setattr("mtp_turbo.models.load.load_model", boom)


@pytest.mark.parametrize("argv,words", [
    (["generate", "hi", "--draft", "mtp", "--drafter", "/no/such/head.gguf"], ["--drafter", "no such file"]),
    (["generate", "hi", "--draft", "ngram", "--drafter", "/no/such/head.gguf"], ["--drafter", "--draft mtp"]),
    (["generate", "word " * 100, "--ctx-size", "32"], ["102 tokens", "context holds 32"]),
    (["generate", "word " * 100, "--ctx-size", "32", "--chat"], ["tokens", "context holds 32"]),
    (["generate", "hi", "--session", "/no/such/dir/s.session"], ["--session", "does not exist"]),
    (["perplexity", "tests/data/tempest_act1.txt", "--ctx", "4"], ["--ctx"]),
    (["perplexity", "/no/such/file.txt"], ["cannot read"]),
    (["bench", "--modes", "plain,magic"], ["--modes"]),
    (["serve", "--port", "70000"], ["port"]),
    (["train-mtp", "--data", "/no/such.npy", "--out", "h.gguf"], ["--data", "no such file"]),
    (["train-mtp", "--data", "tests/data/README.md", "--out", "h.gguf", "--hidden-source", "middle"],
     ["hidden-source"]),
])
def test_bad_input_is_reported_before_the_model_loads(capsys, no_model, argv, words):
    rc, _, err = run(capsys, *argv, "--device", "cpu") if argv[0] != "train-mtp" else run(capsys, *argv)
    assert rc == 1
    one_line_error("\n".join(ln for ln in err.splitlines() if "warning: " not in ln), *words)


class FakeEngine:
    """Stands in for the engine: records what the CLI asked and streams scripted pieces."""

    calls: list = []

    def __init__(self, cfg, gguf=None):
        from mtp_turbo.engine import Stats

        assert gguf is None or gguf.path.name.endswith(".gguf")  # the CLI's opened file, handed on

        self.device, self.cfg, self.last_stats = "cpu", cfg, Stats(prompt_tokens=3, gen_tokens=2, decode_s=0.1,
                                                                    finish_reason="length")
        FakeEngine.calls.append(("init", cfg))

    def generate(self, prompt, **kw):
        from mtp_turbo.engine import Piece

        FakeEngine.calls.append(("generate", prompt, kw))
        yield Piece(" Paris.", (1,))
        yield Piece("\nUser: and then", (2, 3))
        FakeEngine.calls.append(("not closed",))

    def perplexity(self, text, ctx, max_chunks=None, progress=True):
        FakeEngine.calls.append(("perplexity", progress))
        return {"ppl": 2.0, "tokens_scored": 10, "chunks": 1}


@pytest.fixture
def fake_engine(monkeypatch):
    FakeEngine.calls = []
    monkeypatch.setattr("mtp_turbo.engine.Engine", FakeEngine)
    return FakeEngine.calls


def test_chat_on_a_base_model_is_plain_text_with_a_warning(capsys, fake_engine):
    rc, out, err = run(capsys, "generate", "What is the capital of France?", "--chat", "--special", "--stats",
                       "--device", "cpu")
    assert rc == 0 and out == " Paris.\n"  # the plain-text turn ends at the next 'User:'
    assert "warning: gemma-3-270m-q4_k_m.gguf has no chat template" in err and "stop string '\\nUser:'" in err
    _, prompt, kw = fake_engine[1]
    assert prompt == "User: What is the capital of France?\nAssistant:" and kw["special"] is True
    assert ("not closed",) not in fake_engine  # the generation was ended at the stop string


def test_stop_flag_and_perplexity_progress(capsys, fake_engine):
    rc, out, err = run(capsys, "generate", "x", "--stop", "is.", "--stop", "ris", "--device", "cpu")
    assert rc == 0 and out == " Pa\n" and "warning" not in err and fake_engine[1][2]["special"] is False
    rc, out, err = run(capsys, "perplexity", "tests/data/tempest_act1.txt", "--no-progress", "--device", "cpu")
    assert rc == 0 and "perplexity 2.0000" in out and fake_engine[-1] == ("perplexity", False)


def test_session_resume_and_save(capsys, tmp_path, model_path):
    # plain decoding reuses the session's K/V; the MTP drafter (--draft auto on the CPU) needs the
    # main model's hidden rows, which a session does not hold: the prompt is encoded again, the
    # text is the same
    s = tmp_path / "s.session"
    argv = ["generate", "The capital of France is", "-n", "2", "--temperature", "0", "--device", "cpu",
            "--model", str(model_path), "--no-progress", "--stats", "--ctx-size", "64", "--session", str(s)]
    rc, first, err = run(capsys, *argv, "--draft", "none")
    assert rc == 0 and s.is_file() and "(0 cached)" in err
    rc, again, err = run(capsys, *argv, "--draft", "none")
    assert rc == 0 and again == first and "prompt: 6 tokens (5 cached)" in err
    rc, auto, err = run(capsys, *argv)
    assert rc == 0 and auto == first and "(0 cached)" in err and "tokens/round" in err


def test_check_cells_says_pass(capsys):
    rc, out, _ = run(capsys, "check", "cells", "--rounds", "300", "--runs", "1")
    assert rc == 0 and out.strip().splitlines()[-1].startswith("PASS")
