"""Every object the chart renders, cluster-wide and namespaced, passes the real API server's
validation (`kubectl apply --dry-run=server`), with the chart's CRDs installed as helm would."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.helm_chart import CHART, render

pytestmark = pytest.mark.cluster

RELEASE_NAMESPACE, WATCHED = "kvant-dry-run", ["dry-run-a", "dry-run-b"]


@pytest.fixture(scope="module")
def with_chart_crds(apiserver: Any) -> Any:
    apiserver.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    for crd in ("quantizedmodels.kvant.dev", "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"):
        apiserver.wait_established(crd)
    for namespace in [RELEASE_NAMESPACE, *WATCHED]:
        manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        apiserver.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(manifest))
    yield apiserver
    for namespace in [RELEASE_NAMESPACE, *WATCHED]:
        apiserver.kubectl("delete", "namespace", namespace, "--wait=false")


@pytest.mark.parametrize("values", [{}, {"watchNamespaces": WATCHED}], ids=["clusterwide", "namespaced"])
def test_rendered_chart_passes_server_side_dry_run(with_chart_crds: Any, values: dict[str, Any]):
    objects = render(values, release="dry-run", namespace=RELEASE_NAMESPACE)
    result = with_chart_crds.kubectl(
        "apply", "--dry-run=server", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects)
    )
    applied = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(applied) == len(objects), result.stdout
