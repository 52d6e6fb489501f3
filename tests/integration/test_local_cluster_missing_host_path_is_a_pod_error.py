"""A hostPath that is not on the node fails the pod as the kubelet reports it, and nothing is created
for it: not on the host, not in the node's own filesystem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client

from tests.integration.workloads import pod, python_container
from tests.kube_wait import wait_for

pytestmark = pytest.mark.cluster

MISSING = "/models/not-copied-yet"


def test_missing_directory_waits_with_the_kubelets_message_and_creates_nothing(cluster):
    core = client.CoreV1Api(cluster.api_client())
    volume = {"name": "source", "hostPath": {"path": MISSING, "type": "Directory"}}
    container = python_container(
        "main", "print('ran')", volumeMounts=[{"name": "source", "mountPath": "/source"}]
    )
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod("no-source", container, volumes=[volume])))

    def waiting() -> client.V1ContainerStateWaiting | None:
        statuses = core.read_namespaced_pod("no-source", "default").status.container_statuses or []
        state = statuses[0].state.waiting if statuses else None
        return state if state is not None and state.message else None

    state = wait_for(waiting, 60, "the pod to report its missing hostPath")
    assert state.reason == "ContainerCreating"
    assert "hostPath type check failed" in state.message and MISSING in state.message
    assert core.read_namespaced_pod("no-source", "default").status.phase == "Pending"
    assert not cluster.node_path(MISSING).exists() and not Path(MISSING).exists()
    assert not Path("/source").exists()
    cluster.kubectl("delete", "pod", "no-source", "--wait=false")
