"""The node agent's pod lifecycle: graceful deletion, SIGKILL after the grace period, image errors."""

from __future__ import annotations

import json
import shutil

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvant_dev.process import is_alive
from tests.integration.workloads import pod, python_container
from tests.kube_wait import wait_for

pytestmark = pytest.mark.cluster

TRAPS_SIGTERM = """
import pathlib, signal, sys, time
def stop(*_):
    pathlib.Path('/data/stopped-by-sigterm').write_text('bye')
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print('serving', flush=True)
while True: time.sleep(0.1)
"""
IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('stubborn', flush=True)
while True: time.sleep(0.1)
"""


def _running_pid(core: client.CoreV1Api, name: str) -> int | None:
    statuses = core.read_namespaced_pod(name, "default").status.container_statuses or []
    if statuses and statuses[0].state.running:
        return int(statuses[0].container_id.rsplit("/", 1)[-1])
    return None


def _gone(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, "default")
    except ApiException as err:
        return err.status == 404
    return False


def _host_volume(node_path: str) -> dict[str, object]:
    return {"name": "data", "hostPath": {"path": node_path, "type": "DirectoryOrCreate"}}


def test_deleting_a_pod_sends_sigterm_and_the_process_exits(cluster):
    core = client.CoreV1Api(cluster.api_client())
    node_path = "/srv/integration/graceful"
    shutil.rmtree(cluster.node_path(node_path), ignore_errors=True)
    container = python_container("app", TRAPS_SIGTERM, volumeMounts=[{"name": "data", "mountPath": "/data"}])
    spec = pod("graceful", container, volumes=[_host_volume(node_path)], terminationGracePeriodSeconds=20)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(spec))
    pid = wait_for(lambda: _running_pid(core, "graceful"), 60, "the graceful pod to run")

    cluster.kubectl("delete", "pod", "graceful", "--wait=false")
    wait_for(lambda: _gone(core, "graceful"), 40, "the pod object to be removed after its process stopped")
    assert not is_alive(pid)
    assert (cluster.node_path(node_path) / "stopped-by-sigterm").read_text() == "bye", (
        "SIGTERM handler ran inside the mount namespace"
    )


def test_process_ignoring_sigterm_is_killed_after_the_grace_period(cluster):
    core = client.CoreV1Api(cluster.api_client())
    spec = pod("stubborn", python_container("app", IGNORES_SIGTERM), terminationGracePeriodSeconds=2)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(spec))
    pid = wait_for(lambda: _running_pid(core, "stubborn"), 60, "the stubborn pod to run")

    cluster.kubectl("delete", "pod", "stubborn", "--wait=false")
    wait_for(lambda: _gone(core, "stubborn"), 30, "the stubborn pod to be removed")
    assert not is_alive(pid)


def test_foreign_image_is_refused_with_a_clear_reason(cluster):
    core = client.CoreV1Api(cluster.api_client())
    foreign = {"name": "engine", "image": "docker.io/library/nginx:1.27"}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod("foreign", foreign)))

    def waiting() -> client.V1ContainerStateWaiting | None:
        statuses = core.read_namespaced_pod("foreign", "default").status.container_statuses or []
        return (
            statuses[0].state.waiting
            if statuses and statuses[0].state.waiting.reason == "ErrImagePull"
            else None
        )

    state = wait_for(waiting, 60, "the foreign-image pod to report ErrImagePull")
    assert "nginx" in state.message and "kvant-runtime" in state.message
    assert core.read_namespaced_pod("foreign", "default").status.phase == "Pending"
    cluster.kubectl("delete", "pod", "foreign", "--wait=false")
