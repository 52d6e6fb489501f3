"""Jobs: exit 0 completes; exit 1 is retried by the Job controller, then fails with the code recorded."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.integration.workloads import job
from tests.kube_wait import wait_for

pytestmark = pytest.mark.cluster


def _condition(batch: client.BatchV1Api, name: str, kind: str) -> bool:
    status = batch.read_namespaced_job_status(name, "default").status
    return any(c.type == kind and c.status == "True" for c in status.conditions or [])


def test_job_exiting_zero_completes(cluster):
    batch = client.BatchV1Api(cluster.api_client())
    cluster.kubectl("apply", "-f", "-", input=json.dumps(job("ok", "print('done')")))
    wait_for(lambda: _condition(batch, "ok", "Complete"), 90, "job/ok to become Complete")
    logs = cluster.kubectl("logs", "job/ok").stdout
    assert "done" in logs


def test_job_exiting_one_retries_then_fails_with_exit_code(cluster):
    batch = client.BatchV1Api(cluster.api_client())
    core = client.CoreV1Api(cluster.api_client())
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps(job("boom", "import sys; sys.exit(1)", backoff_limit=1))
    )
    wait_for(lambda: _condition(batch, "boom", "Failed"), 120, "job/boom to become Failed")

    pods = core.list_namespaced_pod("default", label_selector="job-name=boom").items
    assert len(pods) == 2, "backoffLimit 1 means one retry: two pods"
    for pod in pods:
        assert pod.status.phase == "Failed"
        terminated = pod.status.container_statuses[0].state.terminated
        assert terminated.exit_code == 1
        assert terminated.reason == "Error"
