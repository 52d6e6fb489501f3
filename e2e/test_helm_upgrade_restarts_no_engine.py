"""helm upgrade to the next release, under load, restarts no engine and fails no request.

The release is installed as 0.1.0 (the chart's own appVersion) and a model is served. The release is
then upgraded with the operator and runtime images at the next release's tag, 0.2.0, as `helm upgrade`
to 0.2.0 will do, while clients keep sending. The operator's own pods roll (their image and settings
change), and the new leader reconciles the model with the new runtime image in its settings.

What must hold: the serving pods are the same pods, never restarted, their Deployment's pod template
unchanged; no Job runs again and the artifact stays where it was (its key does not follow the runtime
tag); every request sent across the upgrade is answered with 200. Then the release is uninstalled,
its namespace deleted, and installed again, under load too: the same must hold, the reinstalled
operator finding the artifact and its record where they were.

Why not from the chart as it was when upgrades were first tested: that chart's RBAC lacks
HorizontalPodAutoscalers, which today's operator watches (kopf stops at the forbidden watch), and the
local cluster runs every image from this checkout, so the old chart cannot run the old operator here.
The chart is the same on both sides; what changes is what a release changes: the images' tags and the
operator's settings. The rendering's own stability across releases is checked by
tests/unit/test_upgrade_restarts_no_engine_unannounced.py.
"""

from __future__ import annotations

import threading
import urllib.request
from typing import Any

import pytest
from kubernetes import client
from tests.helm_chart import CHART, helm, value_flags
from tests.kube_wait import wait_for
from tests.prom_text import metric_sum

from e2e.qm import apply, service_url, serving_pods, wait_ready
from kvant_dev.loadgen import LoadResult, LoadShape, generate_load

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.timeout(900)]

RELEASE, CHART_NAMESPACE = "kvant", "kvant-e2e-upgrade"
OPERATOR_PODS = f"app.kubernetes.io/component=operator,app.kubernetes.io/instance={RELEASE}"
NEXT_TAG = "0.2.0"  # the local node agent runs an image by its repository, whatever the tag
METRICS_PORT = 9090  # the chart's metrics.port
# Well within one simulated replica's capacity: every request must be answered, none refused. Each load
# runs until what it spans is over (the upgrade and the new operator's passes; the uninstall, the
# install again and its passes), `seconds` only bounding it.
STEADY = LoadShape(
    clients=2,
    seconds=300,
    prompt_tokens=16,
    new_tokens=16,
    slo_seconds=30,
    bytes_per_token=1,
    drain_seconds=30,
)
GAP = STEADY  # across the uninstall and the install again


def test_helm_upgrade_under_load_restarts_no_engine(cluster, operator, namespace, tiny_model):
    operator.stop()  # the session's local operator would otherwise reconcile the model too
    values = {
        "watchNamespaces": [namespace],
        "reconcile": {"busyIntervalSeconds": 1, "idleIntervalSeconds": 5},
    }
    core = client.CoreV1Api(cluster.api_client())
    upgraded, reinstalled_and_reconciled = threading.Event(), threading.Event()
    try:
        helm(
            "install", RELEASE, str(CHART), f"--namespace={CHART_NAMESPACE}", "--create-namespace",
            "--wait", "--timeout=120s", *value_flags(values),
            kubeconfig=cluster.kubeconfig,
        )  # fmt: skip
        manifest = tiny_model(kvCache={"dtype": "fp8_e4m3", "scales": "unit"})
        apply(cluster, namespace, manifest)
        before_qm = wait_ready(cluster, namespace, "tiny", timeout=300)
        pods_before = _pods(cluster, namespace)
        template_before = _template(cluster, namespace)
        jobs_before = _jobs(cluster, namespace)
        old_operators = {p.metadata.name for p in _operators(core)}

        result: dict[str, LoadResult] = {}
        load = threading.Thread(
            target=lambda: result.update(
                load=generate_load(service_url(cluster, namespace, "tiny"), STEADY, upgraded)
            )
        )
        load.start()
        helm(
            "upgrade", RELEASE, str(CHART), f"--namespace={CHART_NAMESPACE}", "--wait", "--timeout=180s",
            *value_flags({**values, "image": {"operator": {"tag": NEXT_TAG}, "runtime": {"tag": NEXT_TAG}}}),
            kubeconfig=cluster.kubeconfig,
        )  # fmt: skip
        # The upgraded operator's pods: none of the old ones left, and one of them has reconciled the
        # model (its first pass over a model is a full one, applying every serving object).
        new_operators = wait_for(
            lambda: _new_operators(core, old_operators), 180, "the upgraded operator's pods to run alone"
        )
        wait_for(
            lambda: _reconciled(new_operators) or None, 180, "the upgraded operator to reconcile the model"
        )
        wait_for(lambda: _reconciled(new_operators) >= 3 or None, 120, "two more passes over the model")
        upgraded.set()
        load.join(timeout=STEADY.seconds + STEADY.drain_seconds + 60)
        assert not load.is_alive(), "the load did not end within its bound"

        outcome = result["load"]
        answered = (dict(outcome.statuses), outcome.errors)
        assert set(outcome.statuses) == {200} and outcome.errors == 0, answered
        assert outcome.completed > 0
        changed = _changes(template_before, _template(cluster, namespace))
        assert _pods(cluster, namespace) == pods_before, changed  # same pods, never restarted
        assert not changed
        assert _jobs(cluster, namespace) == jobs_before  # nothing converted again
        after_qm = wait_ready(cluster, namespace, "tiny", timeout=60)
        assert after_qm["status"]["artifact"] == before_qm["status"]["artifact"]
        live = client.AppsV1Api(cluster.api_client()).read_namespaced_deployment("tiny", namespace)
        assert live.metadata.annotations["kvant.dev/runtime-image"].endswith(":0.1.0")

        # The upgraded operator does run with the new runtime in its settings: the pin above held it off.
        settings = _operator_env(core)
        assert settings["KVANT_RUNTIME_IMAGE"].endswith(f":{NEXT_TAG}"), settings

        # Uninstalled, its namespace gone, and installed again: the engines serve throughout, and the
        # new operator finds the artifact and its record, so nothing converts and nothing restarts.
        load = threading.Thread(
            target=lambda: result.update(
                gap=generate_load(service_url(cluster, namespace, "tiny"), GAP, reinstalled_and_reconciled)
            )
        )
        load.start()
        helm("uninstall", RELEASE, f"--namespace={CHART_NAMESPACE}", "--wait", kubeconfig=cluster.kubeconfig)
        cluster.kubectl("delete", "namespace", CHART_NAMESPACE, "--wait=true", "--timeout=120s")
        helm(
            "install", RELEASE, str(CHART), f"--namespace={CHART_NAMESPACE}", "--create-namespace",
            "--wait", "--timeout=120s",
            *value_flags({**values, "image": {"operator": {"tag": NEXT_TAG}, "runtime": {"tag": NEXT_TAG}}}),
            kubeconfig=cluster.kubeconfig,
        )  # fmt: skip
        reinstalled = wait_for(lambda: _new_operators(core, set()), 120, "the reinstalled operator's pods")
        wait_for(lambda: _reconciled(reinstalled) >= 2 or None, 180, "the reinstalled operator's passes")
        reinstalled_and_reconciled.set()
        load.join(timeout=GAP.seconds + GAP.drain_seconds + 60)
        assert not load.is_alive(), "the load did not end within its bound"
        gap = result["gap"]
        assert set(gap.statuses) == {200} and gap.errors == 0, (dict(gap.statuses), gap.errors)
        assert _pods(cluster, namespace) == pods_before
        assert not _changes(template_before, _template(cluster, namespace))
        assert _jobs(cluster, namespace) == jobs_before
        assert (
            wait_ready(cluster, namespace, "tiny", timeout=60)["status"]["artifact"]
            == before_qm["status"]["artifact"]
        )
    finally:  # the release may be gone already (a failure between its uninstall and install again)
        upgraded.set()  # a failure stops the load too, rather than leave it running out its bound
        reinstalled_and_reconciled.set()
        uninstall = ("uninstall", RELEASE, f"--namespace={CHART_NAMESPACE}", "--wait")
        helm(*uninstall, kubeconfig=cluster.kubeconfig, check=False)
        cluster.kubectl("delete", "namespace", CHART_NAMESPACE, "--wait=false")
        operator.start()


def _pods(cluster, namespace: str) -> dict[str, tuple[int, ...]]:
    """Each serving pod's uid and its containers' restart counts."""
    return {
        p.metadata.uid: tuple(s.restart_count for s in p.status.container_statuses or [])
        for p in serving_pods(cluster, namespace, "tiny")
    }


def _template(cluster, namespace: str) -> dict[str, Any]:
    """The Deployment's generation and pod template, as the API server stores them."""
    deployment = client.AppsV1Api(cluster.api_client()).read_namespaced_deployment("tiny", namespace)
    template = client.ApiClient().sanitize_for_serialization(deployment.spec.template)
    return {"generation": deployment.metadata.generation, "template": template}


def _changes(before: Any, after: Any, path: str = "") -> list[str]:
    """Where two renderings of a Deployment differ, as paths with both values."""
    if isinstance(before, dict) and isinstance(after, dict):
        keys = sorted(set(before) | set(after))
        return [c for k in keys for c in _changes(before.get(k), after.get(k), f"{path}.{k}")]
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [
            c
            for i, (b, a) in enumerate(zip(before, after, strict=True))
            for c in _changes(b, a, f"{path}[{i}]")
        ]
    return [] if before == after else [f"{path}: {before!r} -> {after!r}"]


def _jobs(cluster, namespace: str) -> set[str]:
    return {
        j.metadata.uid for j in client.BatchV1Api(cluster.api_client()).list_namespaced_job(namespace).items
    }


def _operators(core: client.CoreV1Api) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod(CHART_NAMESPACE, label_selector=OPERATOR_PODS).items)


def _new_operators(core: client.CoreV1Api, old: set[str]) -> list[client.V1Pod] | None:
    pods = _operators(core)
    names = {p.metadata.name for p in pods}
    running = all(p.status.phase == "Running" and p.status.pod_ip for p in pods)
    return pods if pods and running and not names & old else None


def _reconciled(pods: list[client.V1Pod]) -> float:
    """Reconciles done by the upgraded operator's pods (the leader's; a standby does none)."""
    total = 0.0
    for pod in pods:
        url = f"http://{pod.status.pod_ip}:{METRICS_PORT}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                total += metric_sum(response.read().decode(), "kvant_operator_reconciles_total")
        except OSError:
            continue  # still starting
    return total


def _operator_env(core: client.CoreV1Api) -> dict[str, str]:
    pod = _operators(core)[0]
    return {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}
