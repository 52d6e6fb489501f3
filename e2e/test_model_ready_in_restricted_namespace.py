"""A model goes from apply to Ready in a namespace that enforces the `restricted` Pod Security
Standard: every pod Kvant creates there (plan, convert + calibrate, serving) is admitted by the API
server's PodSecurity admission. Its source is a PersistentVolumeClaim (pvc://), as restricted needs:
a file:// source is a hostPath volume, which restricted refuses."""

from __future__ import annotations

import json

import pytest
from tests.kube_wait import wait_for

from e2e.conftest import node_folder_claim
from e2e.qm import apply, generate, get_qm, is_true, service_url, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def test_a_model_reaches_ready_under_restricted(cluster, operator, namespace, tiny_model, node_checkpoint):
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted", "--overwrite"
    )
    models = node_folder_claim(namespace, "models", node_checkpoint.removeprefix("file://"), "ReadOnlyMany")
    for obj in models:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))
    try:
        apply(cluster, namespace, tiny_model("strict", source={"uri": "pvc://models"}))
        wait_for(
            lambda: is_true(get_qm(cluster, namespace, "strict"), "Converted"),
            180,
            f"Converted=True under restricted; operator log:\n{operator.log_tail()}",
        )
        qm = wait_ready(cluster, namespace, "strict")
        assert is_true(qm, "Calibrated")

        pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
        assert pods, "the model's pods exist"
        for pod in pods:
            security = pod["spec"]["securityContext"]
            assert security["runAsNonRoot"] and security["seccompProfile"]["type"] == "RuntimeDefault"
            assert pod["spec"]["automountServiceAccountToken"] is False
        assert generate(service_url(cluster, namespace, "strict"))["meta_info"]["completion_tokens"] == 2
    finally:
        cluster.kubectl("delete", "pv", f"{namespace}-models", "--wait=false")
