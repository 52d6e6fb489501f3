"""A scale-in takes the replica with the least work: deletion costs from the last protection step, written
on the engine pods just before their Deployment's replicas drop, and only then."""

from __future__ import annotations

import copy
from typing import Any

from kvant_operator.api.status import ArtifactStatus
from kvant_operator.object_keys import DELETION_COST
from kvant_operator.reconcile.scale_in import deletion_costs
from kvant_operator.reconcile.serving_step import serve
from kvant_operator.reconcile.state import Pass
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import NAMESPACE, SETTINGS, body, new_pass

ARTIFACT = ArtifactStatus(uri="pvc://kvant-artifacts/abc", digest="sha256:abc")
WORK = {"tiny-a": 0.62, "tiny-b": 0.04, "tiny-c": 0.3}  # each pod's KV token usage


def _pass(replicas: int, work: dict[str, float] | None = None) -> Pass:
    serving = copy.deepcopy(body()["spec"]["serving"])
    p = new_pass(body(serving={**serving, "replicas": replicas}), planned=True)
    p.artifact = ARTIFACT
    p.pod_work = dict(WORK if work is None else work)
    return p


def _serving_with_pods(replicas: int, kube: MemoryKube | None = None) -> MemoryKube:
    """A model serving `replicas` engine pods, rolled out."""
    kube = kube or MemoryKube()
    serve(_pass(replicas, {}), kube, SETTINGS)
    kube.roll_out(NAMESPACE, "tiny")
    labels = kube.objects[("apps/v1", "Deployment", NAMESPACE, "tiny")]["spec"]["selector"]["matchLabels"]
    for name in sorted(WORK)[:replicas]:
        kube.objects[("v1", "Pod", NAMESPACE, name)] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(labels)},
        }
    return kube


def _costs(kube: MemoryKube) -> dict[str, Any]:
    return {
        key[3]: (obj["metadata"].get("annotations") or {}).get(DELETION_COST)
        for key, obj in kube.objects.items()
        if key[1] == "Pod"
    }


class WatchingKube(MemoryKube):
    """Notes the Deployment's replicas as each cost is written."""

    def __init__(self) -> None:
        super().__init__()
        self.replicas_at_write: list[int] = []

    def annotate_pod(self, namespace: str, name: str, key: str, value: str) -> None:
        deployment = self.objects[("apps/v1", "Deployment", namespace, "tiny")]
        self.replicas_at_write.append(deployment["spec"]["replicas"])
        super().annotate_pod(namespace, name, key, value)


def test_the_pods_carry_their_work_before_the_replicas_drop() -> None:
    kube = _serving_with_pods(3, WatchingKube())
    serve(_pass(2), kube, SETTINGS)
    assert _costs(kube) == {"tiny-a": "620", "tiny-b": "40", "tiny-c": "300"}
    assert kube.objects[("apps/v1", "Deployment", NAMESPACE, "tiny")]["spec"]["replicas"] == 2
    # Every cost written while the Deployment still had 3: its ReplicaSet never sees 2 without them.
    assert isinstance(kube, WatchingKube) and kube.replicas_at_write == [3, 3, 3]


def test_nothing_is_written_but_at_a_scale_in() -> None:
    kube = _serving_with_pods(3)
    serve(_pass(3), kube, SETTINGS)  # the same count: a resync pass
    serve(_pass(4), kube, SETTINGS)  # a scale-out
    assert kube.annotated == []
    serve(_pass(2), kube, SETTINGS)  # the scale-in
    written = len(kube.annotated)
    serve(_pass(2), kube, SETTINGS)  # the next pass, replicas already lowered
    assert len(kube.annotated) == written == 3


def test_without_samples_kubernetes_order_stands() -> None:
    kube = _serving_with_pods(3)
    serve(_pass(2, work={}), kube, SETTINGS)
    assert kube.annotated == [] and set(_costs(kube).values()) == {None}


def test_a_cost_already_right_is_not_written_again() -> None:
    pods: list[dict[str, Any]] = [
        {"metadata": {"name": "tiny-a", "annotations": {DELETION_COST: "620"}}},
        {"metadata": {"name": "tiny-b", "annotations": {DELETION_COST: "900"}}},
        {"metadata": {"name": "tiny-d"}},  # no sample: it may be starting, and Kubernetes ranks it
    ]
    assert deletion_costs(pods, WORK) == {"tiny-b": "40"}
