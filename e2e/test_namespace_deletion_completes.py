"""Deleting a namespace that holds models in every phase removes everything in it within a stated bound.

The models: one Ready (engine pods serving), one mid-fetch (its pod caught inside a file behind a
throttled link), one mid-conversion (its Job's pod running), one Degraded (a corrupt shard, retrying
with backoff) and one just applied (Pending). The namespace controller deletes the models; the
operator must stop each model's daemon and let kopf drop its finalizer, and its Jobs and pods must
go. The operator then holds nothing of them: no daemon, no series.
"""

from __future__ import annotations

import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from tests.fault_proxy import FaultProxy
from tests.kube_wait import wait_for
from tests.model_stores import create_bucket, upload_folder

from e2e.conftest import SOURCE_CREDENTIALS
from e2e.qm import apply, get_qm, is_true, wait_ready
from e2e.test_fetched_sources_reach_ready import apply_secret, s3_keys
from kvant_contracts import prometheus_text
from kvant_contracts.drain import POD_TERMINATION_GRACE_SECONDS
from kvant_dev.cluster import LocalCluster
from kvant_dev.model_stores import ModelStores
from kvant_operator.api.resource import GROUP, PLURAL, VERSION

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.timeout(900)]

# Kubernetes (1.33+) deletes a namespace's pods first and the rest only once they are gone; finding
# pods still terminating, its namespace controller looks again only after half their longest
# terminationGracePeriodSeconds (1,815 s for a serving pod, to cover a drain), whether or not they
# exited sooner. The operator brings that pass forward: when a terminating namespace's last Kvant pod
# is gone it annotates the Namespace, and the controller looks again 5 s later
# (kvant_operator/namespace_nudge.py). So the whole namespace goes within NAMESPACE_GONE_SECONDS: the
# idle serving pods drain (5 s quiet), the Job pods stop, the nudge, the controller's pass, the
# models' finalizers, then the Namespace object itself.
NAMESPACE_GONE_SECONDS = 30
# What a test that waits for an earlier test's models allows (e2e/test_unchanged_model_causes_no_writes).
ONE_PASS_SECONDS = 60


def _metrics(operator: Any) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def test_deleting_a_namespace_with_models_in_every_phase_completes(
    cluster: LocalCluster,
    operator: Any,
    namespace: str,
    tiny_model: Any,
    tiny_checkpoint: Path,
    model_stores: ModelStores,
    node_dir: Any,
) -> None:
    core = client.CoreV1Api(cluster.api_client())
    apply(cluster, namespace, tiny_model("ready", kvCache={"dtype": "bf16"}))

    broken = node_dir / "broken-model"
    shutil.copytree(tiny_checkpoint, broken.host)
    shard = sorted(broken.host.glob("*.safetensors"))[-1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    degraded = tiny_model("degraded", kvCache={"dtype": "bf16"})
    degraded["spec"]["source"]["uri"] = broken.uri
    apply(cluster, namespace, degraded)

    s3 = create_bucket(model_stores.s3, "models")
    prefix = f"{namespace}/slow"
    upload_folder(s3, tiny_checkpoint, "models", prefix)
    s3.put_object(Bucket="models", Key=f"{prefix}/padding.safetensors", Body=b"\0" * (8 << 20))
    apply_secret(cluster, namespace, SOURCE_CREDENTIALS, s3_keys(model_stores))
    host = model_stores.s3.host
    with FaultProxy((host, model_stores.s3.port), host=host) as proxy:
        proxy.throttle(64 << 10)  # 8 MiB at 64 KiB/s: two minutes, far longer than the test holds it
        fetching = tiny_model("fetching", kvCache={"dtype": "bf16"})
        fetching["spec"]["source"] = {"uri": f"s3://models/{prefix}", "s3": {"endpoint": proxy.url}}
        apply(cluster, namespace, fetching)

        wait_ready(cluster, namespace, "ready")
        wait_for(lambda: is_true(get_qm(cluster, namespace, "degraded"), "Degraded"), 180, "Degraded")
        artifacts = node_dir.host / "artifacts" / "sources"
        wait_for(
            lambda: artifacts.exists() and any(p.stat().st_size > 0 for p in artifacts.rglob("*.part")),
            120,
            "the fetch pod to be inside a file",
        )
        # The default example converts to INT4: caught once its Job's pod runs.
        apply(cluster, namespace, tiny_model("converting"))
        wait_for(
            lambda: any(
                p.status.phase == "Running"
                for p in core.list_namespaced_pod(
                    namespace, label_selector="kvant.dev/model=converting,kvant.dev/artifact"
                ).items
            ),
            120,
            "the conversion pod to run",
        )
        apply(cluster, namespace, tiny_model("pending"))
        phases = {
            m: (get_qm(cluster, namespace, m).get("status") or {}).get("phase", "Pending")
            for m in ("ready", "fetching", "converting", "degraded", "pending")
        }
        assert phases["ready"] == "Ready" and phases["fetching"] == "Fetching", phases
        assert phases["converting"] in ("Converting", "Calibrating"), phases
        assert phases["degraded"] not in ("Ready", "Deploying"), phases

        graces = {p.spec.termination_grace_period_seconds for p in core.list_namespaced_pod(namespace).items}
        assert max(graces) == POD_TERMINATION_GRACE_SECONDS, graces  # what the controller would wait on
        started = time.monotonic()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
        batch, custom = client.BatchV1Api(cluster.api_client()), client.CustomObjectsApi(cluster.api_client())

        def left() -> dict[str, list[str]]:
            """What is left of the namespace: the object itself and each kind the models made."""
            try:
                core.read_namespace(namespace)
            except client.ApiException as err:
                if err.status == 404:
                    return {}
                raise
            models = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
            found = {
                "namespace": [namespace],
                "models": [m["metadata"]["name"] for m in models["items"]],
                "pods": [p.metadata.name for p in core.list_namespaced_pod(namespace).items],
                "jobs": [j.metadata.name for j in batch.list_namespaced_job(namespace).items],
                "services": [x.metadata.name for x in core.list_namespaced_service(namespace).items],
                "configmaps": [x.metadata.name for x in core.list_namespaced_config_map(namespace).items],
                "pvcs": [
                    x.metadata.name for x in core.list_namespaced_persistent_volume_claim(namespace).items
                ],
            }
            return {kind: names for kind, names in found.items() if names}

        seen: list[tuple[float, dict[str, list[str]]]] = []

        def gone() -> bool:
            seen.append((time.monotonic() - started, left()))
            return not seen[-1][1]

        try:
            wait_for(gone, NAMESPACE_GONE_SECONDS, "the namespace and everything in it to go", interval=1)
        except AssertionError:
            steps = "\n".join(f"  {at:5.1f} s: {what}" for at, what in seen[:: max(1, len(seen) // 10)])
            pytest.fail(f"left after {NAMESPACE_GONE_SECONDS} s: {seen[-1][1]}; along the way:\n{steps}")
        took = time.monotonic() - started
        pods_at = next(at for at, what in seen if "pods" not in what)
    print(f"a namespace with 5 models: pods gone in {pods_at:.1f} s, the namespace in {took:.1f} s")

    # Nothing of the models stays in the operator: each daemon stopped and forgot its series.
    series = prometheus_text.samples(_metrics(operator))
    kept = [sample for sample in series if sample.labels.get("namespace") == namespace]
    assert not kept, kept[:5]
