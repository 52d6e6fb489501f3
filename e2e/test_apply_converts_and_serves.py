"""apply → plan → INT4 conversion → FP8 KV-scale calibration → serving (simulator + gate) → Ready,
then `kubectl scale` through the scale subresource adds a replica."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from tests.kube_wait import wait_for

from e2e.qm import apply, generate, get_qm, is_true, service_url, serving_pods, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def test_apply_converts_calibrates_and_serves_ready(cluster, operator, namespace, tiny_model, node_dir):
    apply(cluster, namespace, tiny_model())  # examples/tiny.yaml as shipped: INT4 g32, FP8 KV, calibrated
    wait_for(
        lambda: is_true(get_qm(cluster, namespace, "tiny"), "Converted"),
        180,
        f"Converted=True; operator log:\n{operator.log_tail()}",
    )
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "qm/tiny", "--timeout=240s")
    qm = wait_ready(cluster, namespace, "tiny")

    status = qm["status"]
    assert is_true(qm, "Calibrated") and is_true(qm, "Validated")
    assert status["artifact"]["digest"].startswith("sha256:")
    assert status["plan"]["kvCacheDtype"] == "fp8_e4m3" and status["plan"]["kvTokensPerReplica"] > 0
    artifact = node_dir.host / "artifacts" / status["artifact"]["uri"].rsplit("/", 1)[-1]
    config = json.loads((artifact / "config.json").read_text())
    assert config["quantization_config"]["format"] == "pack-quantized"
    assert config["quantization_config"]["kv_cache_scheme"]["type"] == "float"
    manifest = json.loads((artifact / "kvant-manifest.json").read_text())
    assert manifest["digest"] == status["artifact"]["digest"], "status names the calibrated (final) artifact"

    pod = serving_pods(cluster, namespace, "tiny")[0]
    engine_args = next(c for c in pod.spec.containers if c.name == "engine").args
    assert engine_args[engine_args.index("--kv-tokens") + 1] == str(status["plan"]["kvTokensPerReplica"])
    answer = generate(service_url(cluster, namespace, "tiny"), new_tokens=4)
    assert answer["meta_info"]["completion_tokens"] == 4

    cluster.kubectl("scale", "-n", namespace, "qm/tiny", "--replicas=2")
    wait_for(
        lambda: get_qm(cluster, namespace, "tiny")["status"].get("readyReplicas") == 2,
        120,
        f"2 ready replicas after kubectl scale; operator log:\n{operator.log_tail()}",
    )
    path = f"/apis/kvant.dev/v1alpha1/namespaces/{namespace}/quantizedmodels/tiny/scale"
    scale = json.loads(cluster.kubectl("get", "--raw", path).stdout)
    assert scale["spec"]["replicas"] == 2 and scale["status"]["replicas"] == 2
    # The scale's selector (what an autoscaler reads) picks exactly the Deployment's pods, no Job pods.
    core = client.CoreV1Api(cluster.api_client())
    deployment = client.AppsV1Api(cluster.api_client()).read_namespaced_deployment("tiny", namespace)
    own = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
    selected = core.list_namespaced_pod(namespace, label_selector=scale["status"]["selector"]).items
    pods = core.list_namespaced_pod(namespace, label_selector=own).items
    assert len(selected) == 2 and {p.metadata.name for p in selected} == {p.metadata.name for p in pods}
