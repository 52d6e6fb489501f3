"""Every example in examples/ is accepted by the API server, and its defaults agree with the models'."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvant_operator.api import QuantizedModelSpec
from tests.integration.qm_crd import install_crd

pytestmark = pytest.mark.cluster

NAMESPACE = "qm-examples"
EXAMPLES = sorted(
    p for p in (Path(__file__).parents[2] / "examples").glob("*.yaml") if p.name != "kustomization.yaml"
)


@pytest.fixture(scope="module")
def installed(apiserver: Any) -> Any:
    install_crd(apiserver, NAMESPACE)
    return apiserver


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_accepted_and_defaulted_like_the_models(installed: Any, path: Path):
    written = yaml.safe_load(path.read_text())
    installed.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", str(path))
    name = written["metadata"]["name"]
    stored = json.loads(
        installed.kubectl("get", "quantizedmodel", name, "-n", NAMESPACE, "-o", "json").stdout
    )
    assert stored["spec"]["kvCache"]["dtype"] == written["spec"].get("kvCache", {}).get("dtype", "fp8_e4m3")
    assert QuantizedModelSpec.model_validate(stored["spec"]) == QuantizedModelSpec.model_validate(
        written["spec"]
    )


def test_kubectl_get_shows_the_printer_columns(installed: Any):
    for path in EXAMPLES:
        installed.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", str(path))
    table = installed.kubectl("get", "qm", "-n", NAMESPACE).stdout
    header = table.splitlines()[0].split()
    assert header == ["NAME", "PHASE", "FORMAT", "KV-DTYPE", "READY", "CONCURRENCY", "AGE"], table
    assert "fp8_e4m3" in table and "int4" in table
    names = installed.kubectl("get", "kvant", "-n", NAMESPACE, "-o", "name").stdout.split()
    assert len(names) == len(EXAMPLES) and all(n.startswith("quantizedmodel.kvant.dev/") for n in names)
