"""`mtp-turbo generate` through a local `mtp-turbo serve` (client.py): the same text as in-process
for the same seed, no torch on that path, and in-process (saying why under --stats) whenever the
server would not give exactly that. One real server on the CPU per module; the discovery folder is
a temporary XDG_RUNTIME_DIR, so a server of the user's own is never involved."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mtp_turbo.cli import main

_spec = importlib.util.spec_from_file_location("server_conftest", Path(__file__).parent / "server" / "conftest.py")
server_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(server_conftest)

KEY = "client-test-key"
PROMPT = "The capital of France is"
# the generate command, then the heavy modules it imported, on stderr's last line
WRAPPED = ("import sys; from mtp_turbo.cli import main; rc = main(sys.argv[1:]); "
           "print('imported', [m for m in ('torch', 'numpy', 'triton') if m in sys.modules], file=sys.stderr); "
           "sys.exit(rc)")


@pytest.fixture(scope="module")
def live(model_path, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_RUNTIME_DIR", str(run_dir))  # the server process takes this environment
        srv = server_conftest.start_server(model_path, "--ctx-size", "128", "--api-key", KEY)
    srv.run_dir = run_dir
    yield srv
    server_conftest.stop_server(srv)


def args(model_path, *extra):
    return ["generate", PROMPT, "--model", str(model_path), "--device", "cpu", "--ctx-size", "128", "--no-progress",
            "--stats", "-n", "8", "--seed", "11", *extra]


def generate(run_dir, *argv):
    """`mtp-turbo generate` in a fresh process: (stdout, stderr, the heavy modules it imported)."""
    r = subprocess.run([sys.executable, "-c", WRAPPED, *argv], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "XDG_RUNTIME_DIR": str(run_dir)})
    assert r.returncode == 0, r.stderr
    *err, last = r.stderr.rstrip("\n").split("\n")
    assert last.startswith("imported"), r.stderr
    return r.stdout, "\n".join(err), last


def discovery_file(run_dir) -> Path:
    (f,) = (Path(run_dir) / "mtp-turbo").glob("server-*.json")
    return f


@pytest.mark.parametrize("temperature,chat", [("0", False), ("0.7", False), ("0.7", True)])
def test_same_text_as_in_process(live, model_path, temperature, chat):
    argv = args(model_path, "--temperature", temperature, *(["--chat"] if chat else []))
    out, err, imported = generate(live.run_dir, *argv)
    port = live.url.rsplit(":", 1)[1]
    assert f"via server at 127.0.0.1:{port} (device cpu)" in err and "tok/s" in err
    assert imported == "imported []"  # no torch, numpy or triton on the client path
    here, here_err, here_imported = generate(live.run_dir, *argv, "--no-server")
    assert "in-process: --no-server" in here_err and "torch" in here_imported
    assert out == here and out.strip()
    if chat:  # the default model has no chat template: the same warning either way
        assert "has no chat template" in err and "has no chat template" in here_err


def test_symlinked_model_is_the_same_model(live, model_path, tmp_path):
    link = tmp_path / "same.gguf"
    link.symlink_to(model_path)
    _, err, imported = generate(live.run_dir, *args(link, "--temperature", "0"))
    assert "via server at" in err and imported == "imported []"


# ---- in-process, and why: the decision without a second model load (a stand-in engine) ----------------
class StandIn:
    """The engine the in-process path would load: records that it was built, streams one piece."""

    built: list = []

    def __init__(self, cfg, gguf=None):
        from mtp_turbo.engine import Stats

        self.device, self.cfg = "cpu", cfg
        self.last_stats = Stats(prompt_tokens=6, gen_tokens=1, decode_s=0.01, finish_reason="length")
        StandIn.built.append(cfg)

    def generate(self, prompt, **kw):
        from mtp_turbo.engine import Piece

        yield Piece(" in-process", (1,))


@pytest.fixture
def in_process(monkeypatch, live):
    StandIn.built = []
    monkeypatch.setattr("mtp_turbo.engine.Engine", StandIn)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(live.run_dir))

    def run(capsys, *argv):
        assert main(list(argv)) == 0
        out, err = capsys.readouterr()
        return out, err

    return run


@pytest.mark.parametrize("extra,why", [
    (("--ctx-size", "64"), "runs with --ctx-size 128 (here 64)"),
    (("--cpu-weights", "f32"), "--cpu-weights auto (here f32)"),
    (("--draft-window", "32"), "--draft-window 256 (here 32)"),
    (("--order", "top_k,temperature"), "--order"),
    (("--special",), "--special is not in the HTTP API"),
    (tuple(a for i in range(5) for a in ("--stop", f"#{i}")), "more than 4 --stop"),
    (("--temperature", "3"), "answered HTTP 400"),  # the API's range; in-process takes it
])
def test_settings_the_server_does_not_honour_go_in_process(capsys, in_process, model_path, extra, why):
    out, err = in_process(capsys, *args(model_path, *extra))
    assert out == " in-process\n" and len(StandIn.built) == 1
    assert "in-process:" in err and why in err, err


def test_another_model_goes_in_process(capsys, in_process, model_path, tmp_path):
    copy = tmp_path / "copy.gguf"
    try:
        os.link(model_path, copy)  # the same bytes under another name is another --model
    except OSError:
        shutil.copyfile(model_path, copy)
    out, err = in_process(capsys, *args(copy))
    assert out == " in-process\n" and "holds another model" in err


@pytest.fixture
def own_dir(tmp_path, monkeypatch, live):
    """A discovery folder of its own, with a copy of the live server's entry to alter."""
    d = tmp_path / "run"
    (d / "mtp-turbo").mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(d))
    return d / "mtp-turbo", json.loads(discovery_file(live.run_dir).read_text())


def _write(path: Path, info: dict, mode: int = 0o600) -> None:
    path.write_text(json.dumps(info))
    path.chmod(mode)


def test_a_stale_file_goes_in_process(capsys, in_process, own_dir, model_path):
    d, info = own_dir
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # its pid is free now
    _write(d / f"server-{p.pid}.json", {**info, "pid": p.pid})
    out, err = in_process(capsys, *args(model_path))
    assert out == " in-process\n" and f"process {p.pid} has exited" in err


def test_a_key_others_could_read_is_not_used(capsys, in_process, own_dir, model_path):
    d, info = own_dir
    _write(d / f"server-{info['pid']}.json", info, 0o644)
    _, err = in_process(capsys, *args(model_path))
    assert "needs an API key" in err
    _write(d / f"server-{info['pid']}.json", info)  # user-only again: found
    StandIn.built = []
    out, err = in_process(capsys, *args(model_path))
    assert "via server at" in err and not StandIn.built


def test_no_server_at_all(capsys, in_process, tmp_path, monkeypatch, model_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    _, err = in_process(capsys, *args(model_path))
    assert "in-process: no local server is running" in err


def test_the_discovery_file(live, model_path):
    f = discovery_file(live.run_dir)
    info = json.loads(f.read_text())
    assert f.stat().st_mode & 0o777 == 0o600 and (f.parent.stat().st_mode & 0o777) == 0o700
    assert info["model"]["path"] == str(Path(model_path).resolve()) and info["api_key"] == KEY
    card = live.get("/v1/models", key=KEY).json()["data"][0]["mtp_turbo"]
    assert card["pid"] == info["pid"] == live.proc.pid and card["engine"]["ctx_size"] == 128


def test_a_clean_exit_removes_the_file(live):  # last: it stops the module's server
    f = discovery_file(live.run_dir)
    server_conftest.stop_server(live)
    assert live.proc.returncode == 0 and not f.exists()
