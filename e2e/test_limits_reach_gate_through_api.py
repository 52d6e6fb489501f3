"""On-call edits spec.limits while the node projects ConfigMap edits as late as a kubelet does: the
gate has the new limits within seconds through its watch on the limits ConfigMap, while the file
mounted into its pod still holds the old ones."""

from __future__ import annotations

import urllib.request

import pytest
from kubernetes import client
from tests.kube_wait import wait_for

from e2e.qm import apply, metrics_url, patch_spec, serving_pods, wait_ready
from kvant_contracts import prometheus_text
from kvant_contracts.limits import LIMITS_FILE
from kvant_operator.render.limits_configmap import limits_name

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

REACHED_SECONDS = 20  # generous; the file would need the projection delay (60 s) and more


def _gate_metric(pod: client.V1Pod, name: str, **labels: str) -> float | None:
    with urllib.request.urlopen(f"{metrics_url(pod)}/metrics", timeout=5) as response:
        return prometheus_text.value(response.read().decode(), name, **labels)


def test_a_limits_edit_reaches_the_gate_through_the_api_before_the_file(
    cluster, operator, namespace, tiny_model
):
    assert cluster.projection_delay >= 60  # edits reach mounted files as late as on a kubelet
    apply(cluster, namespace, tiny_model(kvCache={"dtype": "bf16"}))
    wait_ready(cluster, namespace, "tiny")
    (pod,) = serving_pods(cluster, namespace, "tiny")
    wait_for(
        lambda: _gate_metric(pod, "kvant_gate_limits_source", source="api") == 1,
        REACHED_SECONDS,
        "the gate's watch on its limits ConfigMap to sync",
    )
    mounted = cluster.pod_volume(namespace, pod.metadata.name, pod.metadata.uid, "limits") / LIMITS_FILE
    configmap = client.CoreV1Api(cluster.api_client()).read_namespaced_config_map(
        limits_name("tiny"), namespace
    )
    before = mounted.read_text()
    assert before == configmap.data[LIMITS_FILE]  # nothing pending: the next projection is our edit's
    assert _gate_metric(pod, "kvant_gate_configured_limit", field="maxConcurrency") == 8

    patch_spec(cluster, namespace, "tiny", {"limits": {"maxConcurrency": 5}})
    wait_for(
        lambda: _gate_metric(pod, "kvant_gate_configured_limit", field="maxConcurrency") == 5,
        REACHED_SECONDS,
        "the gate to apply maxConcurrency 5",
    )
    assert mounted.read_text() == before  # the file still has the old limits: the API path did it
    assert _gate_metric(pod, "kvant_gate_limits_source", source="api") == 1
