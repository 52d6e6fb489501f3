"""A corrupt shard fails the conversion with the converter's own message, publishes nothing, and is
retried with backoff as a new attempt (the failed Job stays, as evidence)."""

from __future__ import annotations

import shutil

import pytest
from kubernetes import client
from tests.kube_wait import wait_for

from e2e.qm import apply, condition, get_qm

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def test_truncated_shard_gives_conversion_failed_then_a_retry(
    cluster, operator, namespace, tiny_model, tiny_checkpoint, node_dir
):
    broken = node_dir / "broken-model"
    shutil.copytree(tiny_checkpoint, broken.host)
    shard = sorted(broken.host.glob("*.safetensors"))[-1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # headers intact, data cut short
    manifest = tiny_model("broken", kvCache={"dtype": "bf16"})
    manifest["spec"]["source"]["uri"] = broken.uri
    apply(cluster, namespace, manifest)

    def failed() -> dict | None:
        found = condition(get_qm(cluster, namespace, "broken"), "Converted")
        return found if found and found["reason"] == "ConversionFailed" else None

    converted = wait_for(failed, 180, "Converted=False ConversionFailed")
    assert shard.name in converted["message"], "the message names the corrupt file"
    qm = get_qm(cluster, namespace, "broken")
    degraded = condition(qm, "Degraded")
    assert degraded is not None and degraded["status"] == "True" and "retrying in" in degraded["message"]
    assert "artifact" not in qm["status"], "nothing is published"

    batch = client.BatchV1Api(cluster.api_client())

    def two_attempts() -> list[str] | None:
        found = batch.list_namespaced_job(namespace, label_selector="kvant.dev/artifact").items
        return sorted(j.metadata.name for j in found) if len(found) >= 2 else None

    attempts = wait_for(two_attempts, 90, "a second attempt after the backoff")
    assert attempts[0].endswith("-1") and attempts[1].endswith("-2")
