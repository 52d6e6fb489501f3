"""The scale subresource: kubectl scale (and so an autoscaler) sets spec.serving.replicas, reads the
replicas and the serving pods' selector from status, and is refused under prefill-decode."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvant_operator.render.roles import engine_selector
from tests.integration.qm_crd import install_crd, manifest

pytestmark = pytest.mark.cluster

NAMESPACE = "qm-scale"


def create(apiserver: Any, name: str, serving: dict[str, Any]) -> None:
    spec = {"source": {"uri": "file:///models/tiny"}, "serving": {"engine": "simulator", **serving}}
    apiserver.kubectl("create", "-n", NAMESPACE, "-f", "-", input=json.dumps(manifest(name, spec)))


def scale(apiserver: Any, name: str) -> dict[str, Any]:
    path = f"/apis/kvant.dev/v1alpha1/namespaces/{NAMESPACE}/quantizedmodels/{name}/scale"
    scaled: dict[str, Any] = json.loads(apiserver.kubectl("get", "--raw", path).stdout)
    return scaled


def test_kubectl_scale_sets_serving_replicas_and_status_feeds_the_scale(apiserver: Any) -> None:
    install_crd(apiserver, NAMESPACE)
    create(apiserver, "scaled", {"gpu": {"memoryGiB": 80}})
    apiserver.kubectl("scale", "-n", NAMESPACE, "qm/scaled", "--replicas=3")
    qm = json.loads(apiserver.kubectl("get", "-n", NAMESPACE, "qm/scaled", "-o", "json").stdout)
    assert qm["spec"]["serving"]["replicas"] == 3

    status = {"status": {"replicas": 2, "readyReplicas": 1, "selector": engine_selector("scaled")}}
    patch = ["patch", "-n", NAMESPACE, "qm/scaled", "--subresource=status", "--type=merge"]
    apiserver.kubectl(*patch, "-p", json.dumps(status))
    scaled = scale(apiserver, "scaled")
    assert scaled["spec"]["replicas"] == 3
    assert scaled["status"] == {
        "replicas": 2,
        "selector": "kvant.dev/model=scaled,kvant.dev/component=engine",
    }


def test_scaling_a_prefill_decode_model_is_refused_naming_the_role_replicas(apiserver: Any) -> None:
    install_crd(apiserver, NAMESPACE)
    create(apiserver, "split", {"gpu": {"memoryGiB": 80}, "disaggregation": {"mode": "prefill-decode"}})
    refused = apiserver.kubectl("scale", "-n", NAMESPACE, "qm/split", "--replicas=2", check=False)
    assert refused.returncode != 0
    assert "spec.serving.disaggregation.prefill.replicas" in refused.stderr, refused.stderr
    assert scale(apiserver, "split")["spec"]["replicas"] == 1
