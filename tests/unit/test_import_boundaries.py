"""The operator image has no torch and the runtime image has no kopf: imports must respect that."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Imports every module of a package in a fresh interpreter, then reports forbidden ones that got loaded.
_PROBE = """
import importlib, pkgutil, sys
package = importlib.import_module({package!r})
for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    importlib.import_module(info.name)
print(",".join(sorted(m for m in {forbidden!r} if m in sys.modules)))
"""


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("kvant_operator", ["torch", "safetensors.torch", "transformers", "compressed_tensors"]),
        ("kvant_runtime", ["kopf"]),
        ("kvant_kernels", ["kopf", "kubernetes"]),
        ("kvant_contracts", ["torch", "kopf", "kubernetes", "numpy"]),
        ("kvant_cli", ["torch", "kopf"]),
    ],
)
def test_package_never_imports_forbidden_modules(package: str, forbidden: list[str]) -> None:
    probe = _PROBE.format(package=package, forbidden=forbidden)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"{package} imported {result.stdout.strip()}"
