"""The launcher reaches a user's SGLang image as a stdlib-only zipapp and validates with its SGLang.

"An SGLang installed the way an image has it": the venv's site-packages (where SGLang 0.5.23 is) as a
plain folder on PYTHONPATH with `python -S`, so Kvant's own packages, which are installed editable
through .pth files, are not importable: only the zipapp can supply them.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from kvant_contracts.job_lines import EngineCheck
from kvant_runtime.launch.sglang_support import unsupported
from kvant_runtime.launch.zipapp import MODULES, build_launcher
from tests.host_leftovers import TOOL_CACHE_VARIABLES

SPEC = {
    "modelPath": "",
    "servedModelName": "tiny",
    "weightsFormat": "bf16",
    "kvCacheDtype": "fp8_e4m3",
    "tensorParallel": 1,
    "host": "127.0.0.1",
    "port": 30000,
}


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_launcher(tmp_path_factory.mktemp("launcher") / "kvant-launch.pyz")


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return tmp_path


def in_image(*argv: str, sglang: bool = True) -> subprocess.CompletedProcess[str]:
    """`python3 ...` as the engine container runs it: site-packages as a plain folder, or nothing."""
    # An image's HOME is its own; here SGLang's cache (~/.cache/sglang by default, made on import)
    # goes where the suite keeps tool caches (tests/host_leftovers.py), not in the host's home.
    caches = {name: os.environ[name] for name in TOOL_CACHE_VARIABLES if name in os.environ}
    env = (
        {"PATH": "/usr/bin:/bin", "PYTHONPATH": site.getsitepackages()[0], **caches}
        if sglang
        else {"PATH": "/usr/bin:/bin", **caches}
    )
    flags = ["-S"] if sglang else ["-S", "-I"]
    return subprocess.run(
        [sys.executable, *flags, *argv], capture_output=True, text=True, env=env, timeout=180, check=False
    )


def test_kvant_is_not_importable_in_the_image_but_from_the_zipapp(pyz: Path) -> None:
    assert in_image("-c", "import kvant_runtime").returncode != 0
    # Every bundled module imports with the standard library alone (no site-packages at all).
    imports = "; ".join(f"import {m}" for m in MODULES)
    bare = in_image("-c", f"import sys; sys.path.insert(0, {str(pyz)!r}); {imports}", sglang=False)
    assert bare.returncode == 0, bare.stderr


def test_print_argv_is_sglangs_command_line_validated_by_the_images_sglang(
    pyz: Path, checkpoint: Path
) -> None:
    spec = {**SPEC, "modelPath": str(checkpoint), "engineArgs": ["--trust-remote-code"]}
    shown = in_image(str(pyz), "launch", "--spec-json", json.dumps(spec), "--print-argv")
    assert shown.returncode == 0, shown.stderr
    line = shown.stdout.strip().splitlines()[-1]
    assert "-m sglang.launch_server --model-path" in line and "--kv-cache-dtype fp8_e4m3" in line
    assert "--trust-remote-code" in line and "event=launch.sglang version=0.5.23" in shown.stderr


def test_check_reports_the_images_sglang_and_a_refused_flag(pyz: Path, checkpoint: Path) -> None:
    ok = in_image(
        str(pyz), "launch", "--spec-json", json.dumps({**SPEC, "modelPath": str(checkpoint)}), "--check"
    )
    found = EngineCheck.from_log(ok.stdout)
    assert ok.returncode == 0 and found == EngineCheck("0.5.23", found.python if found else "", True, None)
    bad = {**SPEC, "modelPath": str(checkpoint), "engineArgs": ["--no-such-sglang-flag"]}
    refused = in_image(str(pyz), "launch", "--spec-json", json.dumps(bad), "--check")
    report = EngineCheck.from_log(refused.stdout)
    assert refused.returncode == 2 and report is not None and report.supported
    assert (
        report.problem is not None
        and "--no-such-sglang-flag" in report.problem
        and "0.5.23" in report.problem
    )
    assert "Traceback" not in refused.stderr


def test_an_image_without_sglang_is_refused_by_name(pyz: Path, checkpoint: Path) -> None:
    run = in_image(
        str(pyz),
        "launch",
        "--spec-json",
        json.dumps({**SPEC, "modelPath": str(checkpoint)}),
        "--check",
        sglang=False,
    )
    report = EngineCheck.from_log(run.stdout)
    assert run.returncode == 2 and report is not None and not report.supported
    assert (
        report.problem is not None
        and "SGLang is not importable" in report.problem
        and "Traceback" not in run.stderr
    )


@pytest.mark.parametrize(
    ("version", "driven"),
    [("0.5.23", True), ("0.5.0rc1", True), ("0.4.9", False), ("0.6.0", False), ("dev", False)],
)
def test_only_the_line_the_launcher_knows_is_driven(version: str, driven: bool) -> None:
    problem = unsupported(version)
    assert (problem is None) is driven
    if problem:
        assert version in problem and "0.5.x" in problem


def test_the_zipapp_is_reproducible(pyz: Path, tmp_path: Path) -> None:
    assert build_launcher(tmp_path / "again.pyz").read_bytes() == pyz.read_bytes()
