"""helm install → the operator runs from the chart's Deployment (node-agent pods, the chart's
ServiceAccount, namespaced RBAC, two peered replicas) → a QuantizedModel reaches Ready → the leading
replica is killed and an edit made right after is still reconciled → helm uninstall.

Proves the chart's RBAC is enough: the only Kvant operator running during this test is the chart's.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from kubernetes import client
from tests.helm_chart import CHART, helm, value_flags
from tests.kube_wait import wait_for

from e2e.qm import get_qm, patch_spec, serving_pods, wait_ready
from kvant_dev.faults import kill_container

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

RELEASE, CHART_NAMESPACE = "kvant", "kvant-e2e-chart"
OPERATOR_PODS = "app.kubernetes.io/component=operator,app.kubernetes.io/instance=kvant"
DENIED = re.compile(r"forbidden|not enough permissions", re.IGNORECASE)  # API 403s and kopf's fallbacks


def test_helm_install_operator_serves(cluster, operator, namespace, tiny_model):
    operator.stop()  # the session's local operator would otherwise reconcile the model too
    values = {
        "watchNamespaces": [namespace],
        "reconcile": {"busyIntervalSeconds": 1, "idleIntervalSeconds": 10},
    }
    try:
        helm(
            "install", RELEASE, str(CHART), f"--namespace={CHART_NAMESPACE}", "--create-namespace",
            "--wait", "--timeout=120s", *value_flags(values),
            kubeconfig=cluster.kubeconfig,
        )  # fmt: skip
        pods = _operator_pods(cluster)
        assert len(pods) == 2
        assert {p.spec.service_account_name for p in pods} == {RELEASE}
        assert all(p.status.phase == "Running" for p in pods)

        # Helm creates the KopfPeering after the Deployment (custom kinds come last); `kvant run`
        # waits for it, so both replicas join the peering before either reconciles.
        names = {p.metadata.name for p in pods}
        wait_for(
            lambda: set(_peers(cluster, namespace)) == names, 90, f"both replicas in the peering: {names}"
        )

        manifest = tiny_model(kvCache={"dtype": "fp8_e4m3", "scales": "unit"})
        manifest["spec"]["kvCache"].pop("calibration", None)
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
        qm = wait_ready(cluster, namespace, "tiny", timeout=240)
        assert qm["status"]["artifact"]["digest"].startswith("sha256:")

        logs = {pod: _operator_log(cluster, pod) for pod in names}
        workers = [pod for pod, log in logs.items() if f"applied Deployment {namespace}/tiny" in log]
        assert len(workers) == 1, f"expected only the peering leader to reconcile, got {workers}"
        for pod, log in logs.items():
            denied = DENIED.search(log)
            assert denied is None, f"{pod} was denied an API call ({denied}):\n{log[-4000:]}"

        # The leader dies as an OOM kill would take it (SIGKILL): the standby takes the peering when
        # the leader's record goes stale, or the node agent's restart of the killed container rejoins
        # and leads (its priority is drawn anew). Either way an edit made at once is reconciled, and
        # nothing that serves restarts.
        serving = {p.metadata.uid for p in serving_pods(cluster, namespace, "tiny")}
        kill_container(cluster, CHART_NAMESPACE, workers[0], "operator")
        killed = time.monotonic()
        patch_spec(cluster, namespace, "tiny", {"limits": {"maxQueued": 17}})
        wait_ready(cluster, namespace, "tiny", timeout=180)
        print(f"the edit after the leader's kill was reconciled in {time.monotonic() - killed:.0f}s")
        after = serving_pods(cluster, namespace, "tiny")
        assert {p.metadata.uid for p in after} == serving
        assert all(c.restart_count == 0 for p in after for c in p.status.container_statuses)
        expected = {workers[0]: 1, **{pod: 0 for pod in names - {workers[0]}}}

        def restarts() -> dict[str, int]:
            return {
                p.metadata.name: p.status.container_statuses[0].restart_count for p in _operator_pods(cluster)
            }

        wait_for(lambda: restarts() == expected or None, 60, f"operator restarts {expected}")

        cluster.kubectl("delete", "-n", namespace, "qm/tiny", "--wait=false")
        wait_for(lambda: not _exists(cluster, namespace), 60, "qm/tiny to be deleted (finalizer released)")
    finally:
        helm("uninstall", RELEASE, f"--namespace={CHART_NAMESPACE}", "--wait", kubeconfig=cluster.kubeconfig)
        cluster.kubectl("delete", "namespace", CHART_NAMESPACE, "--wait=false")
        operator.start()


def _operator_pods(cluster) -> list[client.V1Pod]:
    core = client.CoreV1Api(cluster.api_client())
    return list(core.list_namespaced_pod(CHART_NAMESPACE, label_selector=OPERATOR_PODS).items)


def _operator_log(cluster, pod: str) -> str:
    return str(cluster.kubectl("logs", "-n", CHART_NAMESPACE, pod).stdout)


def _peers(cluster, namespace: str) -> dict[str, object]:
    custom = client.CustomObjectsApi(cluster.api_client())
    peering = custom.get_namespaced_custom_object("kopf.dev", "v1", namespace, "kopfpeerings", RELEASE)
    return dict(peering.get("status") or {})


def _exists(cluster, namespace: str) -> bool:
    try:
        get_qm(cluster, namespace, "tiny")
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True
