"""Rendering and installing charts/kvant with the pinned helm binary, for unit, integration and e2e tests."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import yaml

from kvant_contracts.kube_object import Obj
from kvant_dev.toolchain import Toolchain

CHART = Path(__file__).resolve().parent.parent / "charts" / "kvant"


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = [str(Toolchain.locate().helm), *args]
    if kubeconfig is not None:
        argv.append(f"--kubeconfig={kubeconfig}")
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"`helm {' '.join(args)}` failed ({result.returncode}):\n{result.stderr}")
    return result


def value_flags(values: Obj) -> list[str]:
    """`--set-json` flags for a values dict (one per top-level key)."""
    return [f"--set-json={key}={json.dumps(value)}" for key, value in values.items()]


def render(
    values: Obj | None = None,
    release: str = "kvant",
    namespace: str = "kvant-system",
    api_versions: Sequence[str] = (),
    include_crds: bool = False,
) -> list[Obj]:
    """The chart's objects as `helm template` renders them (CRDs from crds/ only if asked)."""
    args = ["template", release, str(CHART), f"--namespace={namespace}", *value_flags(values or {})]
    args += [f"--api-versions={v}" for v in api_versions]
    if include_crds:
        args.append("--include-crds")
    return [doc for doc in yaml.safe_load_all(helm(*args).stdout) if doc]


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[Obj], kind: str) -> Obj:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, rendered {len(found)}"
    return found[0]
