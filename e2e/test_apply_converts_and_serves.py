"""apply → plan → INT4 conversion Job → serving pods (simulator + gate) → Ready, then traffic flows."""

from __future__ import annotations

import json
import urllib.request

import pytest
from tests.kube_wait import wait_for

from e2e.qm import get_qm, is_true, serving_pods

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def test_apply_converts_and_serves_ready(cluster, operator, namespace, tiny_model):
    manifest = tiny_model(kvCache={"dtype": "fp8_e4m3", "scales": "unit"})
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))

    wait_for(
        lambda: is_true(get_qm(cluster, namespace, "tiny"), "Converted"),
        180,
        f"Converted=True; operator log:\n{operator.log_tail()}",
    )
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "qm/tiny", "--timeout=180s")

    qm = get_qm(cluster, namespace, "tiny")
    status = qm["status"]
    assert status["phase"] == "Ready"
    assert status["observedGeneration"] == qm["metadata"]["generation"]
    assert status["artifact"]["digest"].startswith("sha256:")
    assert status["plan"]["kvTokensPerReplica"] > 0

    pod = serving_pods(cluster, namespace, "tiny")[0]
    engine_args = next(c for c in pod.spec.containers if c.name == "engine").args
    assert engine_args[engine_args.index("--kv-tokens") + 1] == str(status["plan"]["kvTokensPerReplica"])
    body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 4}}).encode()
    request = urllib.request.Request(
        f"http://{pod.status.pod_ip}:8000/generate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
        assert json.load(response)["meta_info"]["completion_tokens"] == 4
