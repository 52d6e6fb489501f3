"""Installs the generated QuantizedModel CRD into the test apiserver, once per module that asks, and
removes the models a module made when it ends (tests/integration/conftest.py).

The session's cluster is shared with the e2e tests, whose operator watches every namespace: a model
left here would be reconciled for the rest of the session (its source does not exist, so it retries
for ever), costing the operator API requests that the idle-window test counts, and keeping that test
from ever seeing its model alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvant_operator.api import CRD_NAME

CRD_FILE = Path(__file__).parents[2] / "crds" / "quantizedmodels.kvant.dev.yaml"
GROUP, VERSION, PLURAL = "kvant.dev", "v1alpha1", "quantizedmodels"
# The namespaces install_crd made since the last cleanup: each module's models are deleted as it ends.
namespaces_made: set[str] = set()


def install_crd(apiserver: Any, namespace: str) -> None:
    """Applies the checked-in CRD (the file users apply), waits for it, and makes `namespace`."""
    apiserver.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    apiserver.wait_established(CRD_NAME)
    namespace_manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    apiserver.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(namespace_manifest))
    namespaces_made.add(namespace)


def remove_models(apiserver: Any) -> None:
    """Deletes every model in the namespaces made, then the namespaces. No operator runs during these
    tests, so no finalizer holds a model: they are gone when the call returns."""
    for namespace in sorted(namespaces_made):
        apiserver.kubectl("delete", PLURAL, "--all", "-n", namespace, "--wait=true", "--timeout=60s")
        apiserver.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")
    namespaces_made.clear()


def manifest(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "QuantizedModel",
        "metadata": {"name": name},
        "spec": spec,
    }
