"""An earlier commit runs in this checkout's virtualenv only where every pin it names is still here:
this checkout may add a package (the old code never imports it), never change or drop one, and a
pyproject may grow its dependencies but nothing else (its entry points decide what the venv runs)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kvant_dev.releases import pins_kept

CONSTRAINTS = "# pins\nkopf==1.45.2\ntokenizers==0.23.3  # counts\n"
PYPROJECT = """[project]
name = "kvant-runtime"
dependencies = ["tokenizers", "jinja2"]

[project.entry-points."kvant.commands"]
runtime = "kvant_runtime.runtime_commands:register"
"""


def _repo(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "runtime").mkdir()
    (tmp_path / "constraints.txt").write_text(CONSTRAINTS)
    (tmp_path / "runtime/pyproject.toml").write_text(PYPROJECT)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "old"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    return tmp_path, head.stdout.strip()


def test_added_pins_keep_an_earlier_commit_runnable_and_changed_ones_do_not(tmp_path: Path) -> None:
    repo, old = _repo(tmp_path)
    assert pins_kept(repo, old, "constraints.txt") and pins_kept(repo, old, "runtime/pyproject.toml")
    (repo / "constraints.txt").write_text(CONSTRAINTS + "sentencepiece==0.2.1\n")
    assert pins_kept(repo, old, "constraints.txt")
    (repo / "constraints.txt").write_text(CONSTRAINTS.replace("0.23.3", "0.23.4"))
    assert not pins_kept(repo, old, "constraints.txt")
    (repo / "constraints.txt").write_text(CONSTRAINTS.replace("kopf==1.45.2\n", ""))
    assert not pins_kept(repo, old, "constraints.txt")


def test_a_pyproject_may_only_grow_its_dependencies(tmp_path: Path) -> None:
    repo, old = _repo(tmp_path)
    pyproject = repo / "runtime/pyproject.toml"
    pyproject.write_text(PYPROJECT.replace('"jinja2"]', '"jinja2", "pillow"]'))
    assert pins_kept(repo, old, "runtime/pyproject.toml")
    pyproject.write_text(PYPROJECT.replace('"tokenizers", ', ""))
    assert not pins_kept(repo, old, "runtime/pyproject.toml")
    pyproject.write_text(PYPROJECT.replace("runtime_commands:register", "commands:register"))
    assert not pins_kept(repo, old, "runtime/pyproject.toml")
