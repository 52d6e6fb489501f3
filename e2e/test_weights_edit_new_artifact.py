"""A weights edit makes a second artifact with its own Job, then rolls the pods onto it."""

from __future__ import annotations

import pytest
from kubernetes import client

from e2e.qm import apply, patch_spec, serving_pods, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def _artifact_jobs(cluster, namespace: str) -> list[str]:
    jobs = client.BatchV1Api(cluster.api_client()).list_namespaced_job(
        namespace, label_selector="kvant.dev/artifact"
    )
    return sorted(j.metadata.name for j in jobs.items)


def test_weights_edit_converts_again_then_rolls(cluster, operator, namespace, tiny_model):
    apply(cluster, namespace, tiny_model(kvCache={"dtype": "bf16"}))
    first = wait_ready(cluster, namespace, "tiny")["status"]["artifact"]
    old_pods = {p.metadata.uid for p in serving_pods(cluster, namespace, "tiny")}
    assert len(_artifact_jobs(cluster, namespace)) == 1

    patch_spec(cluster, namespace, "tiny", {"weights": {"groupSize": 64}})
    second = wait_ready(cluster, namespace, "tiny")["status"]["artifact"]

    assert second["uri"] != first["uri"] and second["digest"] != first["digest"]
    assert len(_artifact_jobs(cluster, namespace)) == 2
    pods = serving_pods(cluster, namespace, "tiny")
    assert pods and not old_pods & {p.metadata.uid for p in pods}
    volume = next(v for v in pods[0].spec.volumes if v.name == "model")
    assert volume.persistent_volume_claim.claim_name == "kvant-artifacts"
