"""The cached door: a settled model's reads come from the watch-backed indexes, and everything the
indexes cannot vouch for (an unseen object, an object Kvant did not apply, our own write the watch has
not shown yet) goes to the API server, here an in-memory door that counts what it is asked."""

from __future__ import annotations

from typing import Any

from kvant_contracts.kube_object import Obj
from kvant_operator.kube_cache import (
    PODS,
    ROLLOUT_STATUS,
    SERVING_KINDS,
    CachedKind,
    CachedKube,
    Index,
    pod_entry,
    serving_entry,
)
from kvant_operator.object_keys import APPLIED_HASH, COMPONENT_LABEL, MODEL_LABEL, SERVING_COMPONENT
from tests.unit.memory_kube import MemoryKube

DEPLOYMENTS = next(k for k in SERVING_KINDS if k.kind == "Deployment")
NS = "models"


class CountingKube(MemoryKube):
    """The API server's part: every read it answers is one request."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, str]] = []

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        self.reads.append(("get", kind))
        return super().get(api_version, kind, namespace, name)

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[Obj]:
        self.reads.append(("list", kind))
        return super().list(api_version, kind, namespace, label_selector)


class Watch:
    """kopf's part: indexes filled from what the watch delivered, one dict per kind."""

    def __init__(self) -> None:
        self.indexes: dict[CachedKind, dict[Any, list[Obj]]] = {k: {} for k in (*SERVING_KINDS, PODS)}

    def deliver(self, kind: CachedKind, body: Obj) -> None:
        entry = (pod_entry if kind == PODS else serving_entry)(body)
        index = self.indexes[kind]
        for key in [k for k, objs in index.items() if any(_same(o, body) for o in objs)]:
            del index[key]
        for key, value in (entry or {}).items():
            index.setdefault(key, []).append(value)

    def views(self) -> dict[CachedKind, Index]:
        return dict(self.indexes)


def _same(entry: Obj, body: Obj) -> bool:
    return bool(entry["metadata"]["name"] == body["metadata"]["name"])


def deployment(name: str = "tiny-serve", replicas: int = 1, image: str = "engine:1") -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {MODEL_LABEL: "tiny"},
            "annotations": {APPLIED_HASH: f"hash-of-{image}-{replicas}"},
        },
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"image": image}]}}},
    }


def door() -> tuple[CachedKube, CountingKube, Watch, list[float]]:
    kube, watch, now = CountingKube(), Watch(), [0.0]
    return CachedKube(kube, watch.views(), clock=lambda: now[0]), kube, watch, now


def test_settled_object_is_read_from_the_index():
    cached, kube, watch, _ = door()
    cached.ensure(deployment())
    kube.roll_out(NS, "tiny-serve")
    watch.deliver(DEPLOYMENTS, kube.objects[("apps/v1", "Deployment", NS, "tiny-serve")])
    kube.reads.clear()

    assert cached.ensure(deployment()) is False
    live = cached.get("apps/v1", "Deployment", NS, "tiny-serve")

    assert kube.reads == [] and kube.applied == [("apps/v1", "Deployment", NS, "tiny-serve")]
    assert live is not None
    assert live["status"]["readyReplicas"] == 1 and live["metadata"]["generation"] == 1
    assert set(live["spec"]) == {"replicas"}  # a summary: what ensure, rollout and scale-in read
    assert set(live["status"]) <= set(ROLLOUT_STATUS)


def test_object_the_watch_has_not_shown_is_read_from_the_api_server():
    cached, kube, _, _ = door()
    kube.apply(deployment())  # applied by an earlier operator; this watch has not delivered it yet

    live = cached.get("apps/v1", "Deployment", NS, "tiny-serve")

    assert kube.reads == [("get", "Deployment")]
    assert live is not None and live["spec"]["replicas"] == 1


def test_object_the_index_has_not_seen_is_applied_without_a_read():
    """kopf fills the indexes before any handler runs: an unseen object does not exist, so a model's
    first pass applies it straight away, not after a GET that answers 404."""
    cached, kube, _, _ = door()

    assert cached.ensure(deployment()) is True

    assert kube.reads == [] and kube.applied == [("apps/v1", "Deployment", NS, "tiny-serve")]
    # Our own write that the watch has not shown yet: read from the API server, found current.
    assert cached.ensure(deployment()) is False
    assert kube.reads == [("get", "Deployment")] and len(kube.applied) == 1


def test_stale_applied_hash_in_the_index_re_applies():
    cached, kube, watch, _ = door()
    cached.ensure(deployment(image="engine:1"))
    watch.deliver(DEPLOYMENTS, kube.objects[("apps/v1", "Deployment", NS, "tiny-serve")])

    assert cached.ensure(deployment(image="engine:2")) is True

    stored = kube.objects[("apps/v1", "Deployment", NS, "tiny-serve")]
    assert stored["metadata"]["annotations"][APPLIED_HASH] == "hash-of-engine:2-1"
    assert stored["metadata"]["generation"] == 2


def test_own_write_is_read_from_the_api_server_until_the_watch_shows_it():
    cached, kube, watch, _ = door()
    cached.ensure(deployment(image="engine:1"))
    kube.roll_out(NS, "tiny-serve")
    watch.deliver(DEPLOYMENTS, kube.objects[("apps/v1", "Deployment", NS, "tiny-serve")])
    cached.ensure(deployment(image="engine:2"))  # the engine edit: generation 2, not delivered yet
    kube.reads.clear()

    live = cached.get("apps/v1", "Deployment", NS, "tiny-serve")
    assert live is not None and live["metadata"]["generation"] == 2  # not the index's generation 1
    assert kube.reads == [("get", "Deployment")]

    watch.deliver(DEPLOYMENTS, kube.objects[("apps/v1", "Deployment", NS, "tiny-serve")])
    kube.reads.clear()
    live = cached.get("apps/v1", "Deployment", NS, "tiny-serve")
    assert live is not None and live["metadata"]["generation"] == 2
    assert kube.reads == []


def test_a_write_the_watch_never_shows_stops_bypassing_it():
    cached, kube, watch, now = door()
    cached.ensure(deployment(image="engine:1"))
    watch.deliver(DEPLOYMENTS, kube.objects[("apps/v1", "Deployment", NS, "tiny-serve")])
    cached.ensure(deployment(image="engine:2"))  # its event is lost
    now[0] += 60
    kube.reads.clear()

    cached.get("apps/v1", "Deployment", NS, "tiny-serve")

    assert kube.reads == []


def test_one_models_serving_objects_are_listed_from_the_index():
    cached, kube, watch, _ = door()
    for name, model in (("tiny-serve", "tiny"), ("tiny-router", "tiny"), ("big-serve", "big")):
        body = deployment(name)
        body["metadata"]["labels"] = {MODEL_LABEL: model, COMPONENT_LABEL: SERVING_COMPONENT}
        body["metadata"]["ownerReferences"] = [{"kind": "QuantizedModel", "name": model, "uid": model}]
        watch.deliver(DEPLOYMENTS, body)

    found = cached.list("apps/v1", "Deployment", NS, f"{MODEL_LABEL}=tiny,{COMPONENT_LABEL}=serving")

    assert sorted(d["metadata"]["name"] for d in found) == ["tiny-router", "tiny-serve"]
    assert found[0]["metadata"]["ownerReferences"] == [{"uid": "tiny"}]  # what prune checks
    assert kube.reads == []
    cached.list("apps/v1", "Deployment", NS, f"{MODEL_LABEL}=tiny")  # not only serving objects
    assert kube.reads == [("list", "Deployment")]


def test_objects_kvant_did_not_apply_are_not_indexed():
    record = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rec", "namespace": NS}}
    assert serving_entry(record) is None  # an artifact record: its data is read from the API server


def test_engine_pods_are_listed_from_the_index():
    cached, kube, watch, _ = door()
    for name, kind in (("tiny-serve-a", "engine"), ("tiny-router-b", "router")):
        labels = {MODEL_LABEL: "tiny", "kvant.dev/role-kind": kind}
        watch.deliver(
            PODS,
            {
                "metadata": {"name": name, "namespace": NS, "labels": labels},
                "spec": {"initContainers": [{"name": "engine-check", "image": "sglang:1", "args": []}]},
                "status": {"podIP": "198.18.0.9"},
            },
        )

    pods = cached.list("v1", "Pod", NS, f"{MODEL_LABEL}=tiny,kvant.dev/role-kind=engine")

    assert [p["metadata"]["name"] for p in pods] == ["tiny-serve-a"]
    assert pods[0]["status"]["podIP"] == "198.18.0.9"
    assert pods[0]["spec"]["initContainers"] == [{"name": "engine-check", "image": "sglang:1"}]
    assert cached.list("v1", "Pod", NS, f"{MODEL_LABEL}=other") == []
    assert kube.reads == []


def test_pod_lists_the_index_cannot_answer_go_to_the_api_server():
    cached, kube, _, _ = door()
    cached.list("v1", "Pod", NS, "job-name=plan-abc")  # a Job's pods: not selected by model
    cached.list("v1", "Pod", NS, f"{MODEL_LABEL}=tiny,!kvant.dev/role-kind")
    cached.list("batch/v1", "Job", NS, f"{MODEL_LABEL}=tiny")
    assert kube.reads == [("list", "Pod"), ("list", "Pod"), ("list", "Job")]


def test_pod_entry_skips_pods_of_no_model():
    assert pod_entry({"metadata": {"name": "x", "namespace": NS}, "spec": {}}) is None
