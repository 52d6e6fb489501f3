"""The runtime wheel (what the runtime image installs) holds the product only: the tiny test models,
their generator options and any test hook live in the development package (#41). The wheel is built
from a copy of the runtime's sources, so the build leaves nothing in the tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_runtime_wheel_has_no_tiny_model_module(tmp_path: Path) -> None:
    source = tmp_path / "runtime"
    shutil.copytree(
        ROOT / "runtime", source, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build")
    )
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    result = subprocess.run(
        [*build, "-w", str(tmp_path / "dist"), str(source)], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("kvant_runtime-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    modules = [name for name in names if name.endswith(".py")]
    assert "kvant_runtime/gate/admission.py" in modules and len(modules) > 50, modules[:5]
    assert [name for name in modules if Path(name).name.startswith("tiny")] == []
    assert "kvant_runtime/calibrate/data/" in " ".join(names), "the built-in texts ship in the wheel"
