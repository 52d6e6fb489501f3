"""Killing the operator mid-conversion and restarting it leaves exactly one Job, which completes."""

from __future__ import annotations

import pytest
from kubernetes import client
from tests.kube_wait import wait_for

from e2e.qm import apply, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def test_operator_killed_mid_conversion_resumes_same_job(cluster, operator, namespace, tiny_model):
    batch = client.BatchV1Api(cluster.api_client())

    def artifact_jobs() -> list:
        return batch.list_namespaced_job(namespace, label_selector="kvant.dev/artifact").items

    apply(cluster, namespace, tiny_model(kvCache={"dtype": "bf16"}))
    job = wait_for(artifact_jobs, 120, "the artifact Job to be created")[0]
    operator.kill()
    operator.start()

    wait_ready(cluster, namespace, "tiny")
    jobs = artifact_jobs()
    assert [j.metadata.uid for j in jobs] == [job.metadata.uid], "the restarted operator reused the same Job"
