"""Artifacts and their records outlive the operator and the model (#32 item 3): a restarted operator
with no memory of its own finds a converted model Ready without converting again, and a model
deleted and applied again reuses its artifact through the record instead of converting again."""

from __future__ import annotations

import pytest
from kubernetes import client
from tests.kube_wait import wait_for

from e2e.qm import apply, get_qm, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def test_a_new_operator_and_a_new_model_reuse_the_artifact(cluster, operator, namespace, tiny_model):
    batch = client.BatchV1Api(cluster.api_client())

    def artifact_jobs() -> list[str]:
        found = batch.list_namespaced_job(namespace, label_selector="kvant.dev/artifact").items
        return sorted(j.metadata.uid for j in found)

    apply(cluster, namespace, tiny_model())  # INT4 weights: a conversion Job
    digest = wait_ready(cluster, namespace, "tiny", timeout=240)["status"]["artifact"]["digest"]
    jobs = artifact_jobs()
    assert len(jobs) == 1

    # The operator is gone (as with helm uninstall, or its namespace lost) and a new one starts.
    operator.kill()
    operator.start()
    assert wait_ready(cluster, namespace, "tiny")["status"]["artifact"]["digest"] == digest
    assert artifact_jobs() == jobs, "the new operator converted again"

    # The model itself is deleted (its Jobs go with it); the record stays, and the same spec
    # applied again serves the same artifact without a conversion.
    cluster.kubectl("delete", "-n", namespace, "qm/tiny", "--timeout=90s")
    wait_for(lambda: not artifact_jobs(), 90, "the model's Jobs to be collected")
    apply(cluster, namespace, tiny_model())
    qm = wait_ready(cluster, namespace, "tiny", timeout=240)
    assert qm["status"]["artifact"]["digest"] == digest
    assert artifact_jobs() == [], "the re-created model converted again instead of reusing the record"
    assert get_qm(cluster, namespace, "tiny")["status"]["phase"] == "Ready"
