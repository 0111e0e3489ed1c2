"""The README's "Use" section as a newcomer pastes it: every shell line that needs no GPU, no server
and no network runs from a clean folder and exits 0 (each within a time limit). Lines skipped say
why: `serve` (a server), `models install` and models the registry has not installed here (the
network), `--device cuda` (a GPU)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def use_lines() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    use = text.split("\n## Use\n", 1)[1].split("\n## ", 1)[0]
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", use, re.S):
        for ln in block.splitlines():
            ln = ln.split("  #", 1)[0].strip()  # the trailing comment (two spaces before its #)
            if ln and not ln.startswith("#"):
                lines.append(ln)
    return lines


def why_skipped(line: str) -> str | None:
    from mtp_turbo.io.registry import entries, installed

    if " serve" in line:
        return "starts a server"
    if "models install" in line:
        return "downloads from PyPI"
    if "--device cuda" in line:
        return "needs a GPU"
    for e in entries():
        if re.search(rf"--model {re.escape(e.name)}\b", line) and not installed(e):
            return f"{e.name} is not installed here (downloads from PyPI)"
    return None


def test_the_use_section_has_the_commands_it_should():
    lines = use_lines()
    assert len(lines) >= 15 and all(ln.startswith("mtp-turbo") for ln in lines), lines
    assert not any("|" in ln for ln in lines)  # "a | b" reads as a pipe in a shell


@pytest.mark.slow
@pytest.mark.parametrize("line", use_lines())
def test_readme_line_runs(line, tmp_path):
    why = why_skipped(line)
    if why is not None:
        pytest.skip(f"not run here: {why}")
    exe = shutil.which("mtp-turbo", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    assert exe, "the mtp-turbo command is not installed (pip install -e .)"
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # the README's paths are relative to a clone
    env = {**os.environ, "PATH": os.path.dirname(exe) + os.pathsep + os.environ.get("PATH", "")}
    r = subprocess.run(["bash", "-c", f"set -e; {line}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, (line, r.stderr[-2000:])
