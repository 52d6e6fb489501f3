"""On-call edits spec.limits: the gate follows within seconds and no pod restarts."""

from __future__ import annotations

import urllib.request

import pytest
from tests.kube_wait import wait_for

from e2e.qm import apply, patch_spec, serving_pods, wait_ready
from kvant_contracts import prometheus_text

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def _gate_limit(pod_ip: str, field: str) -> float | None:
    with urllib.request.urlopen(f"http://{pod_ip}:9090/metrics", timeout=5) as response:
        return prometheus_text.value(response.read().decode(), "kvant_gate_configured_limit", field=field)


def test_limits_edit_reaches_gate_without_restart(cluster, operator, namespace, tiny_model):
    apply(cluster, namespace, tiny_model(kvCache={"dtype": "bf16"}))
    wait_ready(cluster, namespace, "tiny")
    before = {p.metadata.uid: p for p in serving_pods(cluster, namespace, "tiny")}
    pod_ip = next(iter(before.values())).status.pod_ip
    assert _gate_limit(pod_ip, "maxConcurrency") == 8

    patch_spec(cluster, namespace, "tiny", {"limits": {"maxConcurrency": 5, "maxQueued": 7}})
    wait_for(lambda: _gate_limit(pod_ip, "maxConcurrency") == 5, 60, "the gate to load maxConcurrency 5")
    assert _gate_limit(pod_ip, "maxQueued") == 7

    after = serving_pods(cluster, namespace, "tiny")
    assert {p.metadata.uid for p in after} == set(before)
    assert all(cs.restart_count == 0 for p in after for cs in p.status.container_statuses)
