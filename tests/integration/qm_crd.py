"""Installs the generated QuantizedModel CRD into the test apiserver, once per module that asks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvant_operator.api import CRD_NAME

CRD_FILE = Path(__file__).parents[2] / "crds" / "quantizedmodels.kvant.dev.yaml"
GROUP, VERSION, PLURAL = "kvant.dev", "v1alpha1", "quantizedmodels"


def install_crd(apiserver: Any, namespace: str) -> None:
    """Applies the checked-in CRD (the file users apply), waits for it, and makes `namespace`."""
    apiserver.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    apiserver.wait_established(CRD_NAME)
    namespace_manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    apiserver.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(namespace_manifest))


def manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "QuantizedModel",
        "metadata": {"name": name},
        "spec": spec,
    }
