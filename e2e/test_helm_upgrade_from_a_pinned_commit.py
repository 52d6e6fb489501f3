"""helm upgrade from a pinned earlier commit of this repository to this tree, under load: engines roll
only where the changelog announces it, one at a time, and every request is answered.

Before: the CRD, the chart and the images of PINNED, an earlier commit. The local node agent runs an
image tagged `git-<commit>` as that commit's source (kvant_dev.releases), so the old chart runs the old
operator, and the old runtime runs the model's gates and simulators, as a real cluster runs an earlier
release's images. The model serves two replicas.

The upgrade, as CHANGELOG.md tells a user to do it: the CRD first, then `helm upgrade` to this tree's
chart and images, while clients keep sending.

What must hold: every request sent across the upgrade is answered with 200, and no Job runs again (the
artifact stays where it was). Where the upgraded operator renders the model's pod template differently,
the engines restart, and CHANGELOG.md's Unreleased section must announce it ("Upgrading restarts
engines because"); then every serving pod is replaced, one new pod at a time, never fewer than the
model's replicas serving (the Deployment's maxSurge 1 and maxUnavailable 0), and the Deployment takes
the new runtime in the same roll. Where the template is the same, the pods are the same, never
restarted, and keep the old runtime (reconcile/runtime_pin.py).

PINNED predates `spec.serving.placement`: its CRD stores no placement, the new CRD defaults it to
`preferred` (a spread in every serving pod), and the drain and priority scheduling changed the template
too, so this upgrade rolls the engines (ROLLS). A later commit's models keep the placement default
their CRD stored (`none` at some commits), and then nothing rolls: which of the two happens is a
property of the pair of commits, so the test states it rather than guess it. At each release, move
PINNED to the release's commit and set ROLLS; a commit whose dependency pins differ from this tree's
cannot run here, and `releases.check_out` says so.

Then the release is uninstalled, its namespace deleted, and installed again at the next image tags
(0.2.0), under load: the engines serve throughout, nothing restarts, and the reinstalled operator finds
the artifact and its record where they were; the Deployment keeps the runtime it runs, though the new
operator's settings name the next tag. The chart's own rendering across releases is checked by
tests/unit/test_upgrade_restarts_no_engine_unannounced.py.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from tests.helm_chart import CHART, helm, value_flags
from tests.kube_wait import wait_for
from tests.unit.test_upgrade_restarts_no_engine_unannounced import ANNOUNCEMENT, unreleased_notes

from e2e.qm import apply, service_url, serving_pods, wait_ready
from kvant_contracts import prometheus_text
from kvant_dev.loadgen import LoadResult, LoadShape, generate_load
from kvant_dev.releases import REPO, check_out
from kvant_operator.render.roles import engine_selector

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.timeout(1200)]

PINNED = "69df527d24abb1a74b2beadd5b17f93589c7b432"  # before spec.serving.placement and the drain
ROLLS = True  # the upgrade from PINNED changes the serving pod template (the docstring says why)
RELEASE, CHART_NAMESPACE = "kvant", "kvant-e2e-upgrade"
OPERATOR_PODS = f"app.kubernetes.io/component=operator,app.kubernetes.io/instance={RELEASE}"
THIS_TAG = "0.1.0"  # the chart's appVersion: this tree's images
NEXT_TAG = "0.2.0"  # the local node agent runs this tree for any tag but a `git-` one
METRICS_PORT = 9090  # the chart's metrics.port
REPLICAS = 2
# Well within the replicas' capacity: every request must be answered, none refused. Each load runs
# until what it spans is over (the upgrade, its roll and the new operator's passes; the uninstall,
# the install again and its passes), `seconds` only bounding it.
STEADY = LoadShape(
    clients=2,
    seconds=420,
    prompt_tokens=16,
    new_tokens=16,
    slo_seconds=30,
    bytes_per_token=1,
    drain_seconds=30,
    model="tiny",  # the model's routers (two replicas) route by it
)
GAP = STEADY  # across the uninstall and the install again


def test_helm_upgrade_from_a_pinned_commit_under_load(cluster, operator, namespace, tiny_model):
    operator.stop()  # the session's local operator would otherwise reconcile the model too
    old_tag, old_tree = check_out(PINNED)
    if ROLLS:  # engines restart: the changelog must say so
        notes = unreleased_notes((REPO / "CHANGELOG.md").read_text())
        assert ANNOUNCEMENT.search(notes), f"the upgrade from {PINNED[:12]} restarts engines, unannounced"
    values = {
        "watchNamespaces": [namespace],
        "reconcile": {"busyIntervalSeconds": 1, "idleIntervalSeconds": 5},
    }
    core = client.CoreV1Api(cluster.api_client())
    upgraded, reinstalled_and_reconciled = threading.Event(), threading.Event()
    try:
        _apply_crds(cluster, old_tree)
        helm(
            "install", RELEASE, str(old_tree / "charts" / "kvant"), f"--namespace={CHART_NAMESPACE}",
            "--create-namespace", "--wait", "--timeout=120s",
            *value_flags({**values, "image": {"operator": {"tag": old_tag}, "runtime": {"tag": old_tag}}}),
            kubeconfig=cluster.kubeconfig,
        )  # fmt: skip
        assert all(_tag(p) == old_tag for p in _operators(core))
        manifest = tiny_model(kvCache={"dtype": "fp8_e4m3", "scales": "unit"})
        manifest["spec"]["serving"]["replicas"] = REPLICAS
        apply(cluster, namespace, manifest)
        before_qm = wait_ready(cluster, namespace, "tiny", timeout=300)
        pods_before = _pods(cluster, namespace)
        assert len(pods_before) == REPLICAS
        template_before = _template(cluster, namespace)
        jobs_before = _jobs(cluster, namespace)
        old_operators = {p.metadata.name for p in _operators(core)}
        assert _runtime_record(cluster, namespace).endswith(f":{old_tag}")

        result: dict[str, LoadResult] = {}
        load = threading.Thread(
            target=lambda: result.update(
                load=generate_load(service_url(cluster, namespace, "tiny"), STEADY, upgraded)
            )
        )
        load.start()
        watch = RollWatch(core, namespace)
        watch.start()
        _apply_crds(cluster, REPO)
        helm(
            "upgrade", RELEASE, str(CHART), f"--namespace={CHART_NAMESPACE}", "--wait", "--timeout=180s",
            *value_flags(values), kubeconfig=cluster.kubeconfig,
        )  # fmt: skip
        # The upgraded operator's pods: none of the old ones left, and one of them has reconciled the
        # model (its first pass over a model is a full one, applying every serving object).
        new_operators = wait_for(
            lambda: _new_operators(core, old_operators), 180, "the upgraded operator's pods to run alone"
        )
        assert all(_tag(p) == THIS_TAG for p in new_operators)
        wait_for(
            lambda: _reconciled(new_operators) or None, 180, "the upgraded operator to reconcile the model"
        )
        wait_for(lambda: _reconciled(new_operators) >= 3 or None, 120, "two more passes over the model")
        if ROLLS:
            wait_for(lambda: _rolled(cluster, namespace, set(pods_before)), 300, "every serving pod replaced")
        watch.stop()
        upgraded.set()
        load.join(timeout=STEADY.seconds + STEADY.drain_seconds + 60)
        assert not load.is_alive(), "the load did not end within its bound"

        outcome = result["load"]
        answered = (dict(outcome.statuses), outcome.errors, outcome.first_refusal, outcome.first_error)
        assert set(outcome.statuses) == {200} and outcome.errors == 0, answered
        assert outcome.completed > 0
        assert _jobs(cluster, namespace) == jobs_before  # nothing converted again
        after_qm = wait_ready(cluster, namespace, "tiny", timeout=60)
        assert after_qm["status"]["artifact"] == before_qm["status"]["artifact"]
        changed = _changes(template_before, _template(cluster, namespace))
        assert bool(changed) == ROLLS, changed
        if ROLLS:
            assert not set(_pods(cluster, namespace)) & set(pods_before)
            assert watch.fewest_serving >= REPLICAS, watch.report()
            assert watch.most_pods <= REPLICAS + 1, watch.report()
            assert _runtime_record(cluster, namespace).endswith(f":{THIS_TAG}")
        else:
            assert _pods(cluster, namespace) == pods_before, changed  # same pods, never restarted
            assert not changed
            assert _runtime_record(cluster, namespace).endswith(f":{old_tag}")
        pods_upgraded = _pods(cluster, namespace)
        template_upgraded = _template(cluster, namespace)
        record_upgraded = _runtime_record(cluster, namespace)

        # Uninstalled, its namespace gone, and installed again at the next tags: the engines serve
        # throughout, and the new operator finds the artifact and its record, so nothing converts and
        # nothing restarts.
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
        assert set(gap.statuses) == {200} and gap.errors == 0, (
            dict(gap.statuses),
            gap.errors,
            gap.first_refusal,
            gap.first_error,
        )
        assert _pods(cluster, namespace) == pods_upgraded
        assert not _changes(template_upgraded, _template(cluster, namespace))
        assert _jobs(cluster, namespace) == jobs_before
        assert (
            wait_ready(cluster, namespace, "tiny", timeout=60)["status"]["artifact"]
            == before_qm["status"]["artifact"]
        )
        # The reinstalled operator runs with the next runtime in its settings: the record held it off.
        settings = _operator_env(core)
        assert settings["KVANT_RUNTIME_IMAGE"].endswith(f":{NEXT_TAG}"), settings
        assert _runtime_record(cluster, namespace) == record_upgraded
    finally:  # the release may be gone already (a failure between its uninstall and install again)
        upgraded.set()  # a failure stops the load too, rather than leave it running out its bound
        reinstalled_and_reconciled.set()
        uninstall = ("uninstall", RELEASE, f"--namespace={CHART_NAMESPACE}", "--wait")
        helm(*uninstall, kubeconfig=cluster.kubeconfig, check=False)
        cluster.kubectl("delete", "namespace", CHART_NAMESPACE, "--wait=false")
        _apply_crds(cluster, REPO)  # the session's CRD, whatever failed
        operator.start()


@dataclass
class RollWatch:
    """Samples the model's serving pods through the upgrade: how many serve (Ready, not terminating)
    and how many are not terminating, at their fewest and most."""

    core: client.CoreV1Api
    namespace: str
    fewest_serving: int = 1 << 30
    most_pods: int = 0
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def report(self) -> str:
        changes = [s for i, s in enumerate(self.samples) if i == 0 or s[1:] != self.samples[i - 1][1:]]
        return "seconds, serving, pods: " + "; ".join(f"{t:.1f}s {s} {p}" for t, s, p in changes)

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(0.25):
            try:
                pods = self.core.list_namespaced_pod(self.namespace, label_selector=engine_selector("tiny"))
            except client.ApiException:
                continue
            live = [p for p in pods.items if p.metadata.deletion_timestamp is None]
            serving = sum(1 for p in live if _ready(p))
            self.fewest_serving = min(self.fewest_serving, serving)
            self.most_pods = max(self.most_pods, len(live))
            self.samples.append((time.monotonic() - started, serving, len(live)))


def _ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _rolled(cluster, namespace: str, old: set[str]) -> bool:
    """Every pod of the old template gone, terminating ones too, and the Deployment whole again."""
    core = client.CoreV1Api(cluster.api_client())
    pods = core.list_namespaced_pod(namespace, label_selector=engine_selector("tiny")).items
    deployment = client.AppsV1Api(cluster.api_client()).read_namespaced_deployment("tiny", namespace)
    status = deployment.status
    return (
        not {p.metadata.uid for p in pods} & old
        and status.observed_generation == deployment.metadata.generation
        and status.updated_replicas == status.ready_replicas == status.replicas == REPLICAS
    )


def _apply_crds(cluster, tree: Path) -> None:
    """A commit's CRDs, applied as the changelog tells a user to apply them."""
    for crd in sorted((tree / "charts" / "kvant" / "crds").glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    cluster.wait_established("quantizedmodels.kvant.dev")


def _runtime_record(cluster, namespace: str) -> str:
    """The runtime image the model's Deployment records that its pods run."""
    live = client.AppsV1Api(cluster.api_client()).read_namespaced_deployment("tiny", namespace)
    return str(live.metadata.annotations["kvant.dev/runtime-image"])


def _tag(pod: client.V1Pod) -> str:
    return str(pod.spec.containers[0].image).rsplit(":", 1)[1]


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
                total += prometheus_text.total(response.read().decode(), "kvant_operator_reconciles_total")
        except OSError:
            continue  # still starting
    return total


def _operator_env(core: client.CoreV1Api) -> dict[str, str]:
    pod = _operators(core)[0]
    return {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}
