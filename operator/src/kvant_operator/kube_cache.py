"""Watch-backed reads: a settled model's reconcile answered from kopf indexes, not the API server.

A settled model still reconciles every idle interval: its `ensure` compares each serving object's
applied hash, its rollout status reads the Deployments, and protection lists the engine pods. Asked
of the API server, that is a few requests per model per minute; asked of indexes that kopf fills from
label-selected watches (registered in handlers.py), it is none. `CachedKube` wraps the real door,
answers those reads from the indexes, and sends everything else on.

An index keeps a summary of each object, not the object (identity, labels, owners' uids, the
applied-hash annotation; a Deployment's runtime record, replicas and rollout counters; a pod's status,
init containers' images and deletion cost), so thousands of objects cost little memory. So `get`
answers from the index only for objects Kvant applied: what `ensure` and the rollout status read.
Everything else, such as an artifact record's data, comes from the API server. Each serving object is
filed twice: by name (for `get`) and by model (for prune's list).

Freshness:
- kopf fills every index before any handler runs, so an object to `ensure` that the index has not seen
  (and that this operator did not just write) does not exist, or Kvant did not apply it: it is applied
  without a GET first. That is a model's first pass: 8 applies, not 8 GETs that answer 404 and then 8
  applies. Had the object existed after all (another writer a moment ago), the apply changes nothing;
- `get` of an object the index has not seen is a real GET, never "absent": an object Kvant did not
  apply (no hash), such as an artifact record, is read whole;
- a list of one model's serving objects (prune's, on a spec change) comes from the index: every such
  object is applied with the hash, so indexed. One applied earlier in the same pass may not show yet;
  prune then keeps it, which it would anyway (it is desired);
- after the operator's own apply, the object is read from the API server until the index shows the
  applied hash of that write (at most WRITE_SETTLE_S), so the reconcile right after an engine edit sees
  the new Deployment generation, as it did without the cache (a resourceVersion would not do: a
  controller's status update replaces it before a reconcile may look);
- a stale entry can otherwise only make `ensure` re-apply an object that is current, which
  server-side apply turns into no change;
- kopf drops an entry only on a DELETED event: an object deleted while the watch was down for longer
  than the API server keeps its history stays believed present until the operator restarts.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kvant_contracts.kube_object import Obj
from kvant_operator.kube_door import ApplyingDoor, ensure_applied
from kvant_operator.object_keys import (
    APPLIED_HASH,
    COMPONENT_LABEL,
    DELETION_COST,
    MANAGED_BY,
    MODEL_LABEL,
    POD_TEMPLATE_DIGEST,
    RUNTIME_IMAGE,
    SERVING_COMPONENT,
)
from kvant_operator.render import serving

WRITE_SETTLE_S = 30.0  # after this, a write the watch never showed (a missed event) stops bypassing it


@dataclass(frozen=True)
class CachedKind:
    api_version: str
    kind: str
    plural: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def index_id(self) -> str:
        """The kopf handler id, which is also the handler keyword that carries the index."""
        return f"kvant_{self.plural}"


# Every kind the serving step applies (render/serving.py), watched by Kvant's managed-by label and
# indexed by (namespace, name).
SERVING_KINDS = tuple(CachedKind(*kind) for kind in serving.SERVING_KINDS)
SERVING_SELECTOR = f"app.kubernetes.io/managed-by={MANAGED_BY}"
# Pods of every model (engines, routers, Jobs), watched by the model label and indexed by model: a
# pod list that selects one model is answered from its entry.
PODS = CachedKind("v1", "Pod", "pods")
PODS_SELECTOR = MODEL_LABEL

RUNTIME_RECORD = (RUNTIME_IMAGE, POD_TEMPLATE_DIGEST)

# What the rollout status reads of a Deployment's status (serving_step.rollout_pending), all the index
# keeps of it: its conditions and the other kinds' statuses are most of what a summary would weigh.
ROLLOUT_STATUS = ("observedGeneration", "replicas", "updatedReplicas", "readyReplicas")

# What status.autoscaling reads of the model's HorizontalPodAutoscaler (reconcile/autoscaling_status).
AUTOSCALER_STATUS = ("currentReplicas", "desiredReplicas", "lastScaleTime", "conditions")

# What kopf hands over as an index: a key maps to the entries of every object filed under it.
Index = Mapping[Any, Iterable[Obj]]


def serving_entry(body: Mapping[str, Any]) -> dict[tuple[str, ...], Obj] | None:
    """What a serving kind's index keeps of one object, by name and by model; None (not indexed) when
    Kvant did not apply it."""
    meta = body["metadata"]
    applied = (meta.get("annotations") or {}).get(APPLIED_HASH)
    if not applied:
        return None
    owners = [{"uid": o.get("uid")} for o in meta.get("ownerReferences") or []]  # what prune checks
    summary: Obj = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {**_identity(meta), "annotations": _kept(meta), "ownerReferences": owners},
    }
    status = body.get("status") or {}
    if body.get("kind") == "Deployment":  # a rollout's progress, and the replicas a scale-in lowers
        summary["status"] = {key: status[key] for key in ROLLOUT_STATUS if key in status}
        if "replicas" in (body.get("spec") or {}):
            summary["spec"] = {"replicas": body["spec"]["replicas"]}
    elif body.get("kind") == "HorizontalPodAutoscaler":  # what status.autoscaling shows
        summary["status"] = {key: copy.deepcopy(status[key]) for key in AUTOSCALER_STATUS if key in status}
    entry: dict[tuple[str, ...], Obj] = {(meta["namespace"], meta["name"]): summary}
    model = summary["metadata"]["labels"].get(MODEL_LABEL)
    if model:
        entry[_by_model(meta["namespace"], model)] = summary
    return entry


def _kept(meta: Mapping[str, Any]) -> dict[str, str]:
    """The annotations a summary keeps: the applied hash, and a Deployment's runtime record, which an
    upgrade's pass reads to keep the runtime its pods run (reconcile/runtime_pin.py)."""
    annotations = meta.get("annotations") or {}
    return {key: annotations[key] for key in (APPLIED_HASH, *RUNTIME_RECORD) if key in annotations}


def pod_entry(body: Mapping[str, Any]) -> dict[tuple[str, ...], Obj] | None:
    """What the pod index keeps of one pod: what protection and the engine check read."""
    meta = body["metadata"]
    model = (meta.get("labels") or {}).get(MODEL_LABEL)
    if not model:
        return None
    init = [
        {"name": c.get("name"), "image": c.get("image")} for c in body["spec"].get("initContainers") or []
    ]
    cost = (meta.get("annotations") or {}).get(DELETION_COST)  # a scale-in writes it only where it moved
    summary: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **_identity(meta),
            "creationTimestamp": meta.get("creationTimestamp"),
            **({"annotations": {DELETION_COST: cost}} if cost is not None else {}),
        },
        "spec": {"initContainers": init},
        "status": copy.deepcopy(dict(body.get("status") or {})),
    }
    if meta.get("deletionTimestamp"):
        summary["metadata"]["deletionTimestamp"] = meta["deletionTimestamp"]
    return {_by_model(meta["namespace"], model): summary}


def _by_model(namespace: str, model: str) -> tuple[str, str, str]:
    """The key that files an object under its model; a name key is a pair, so the two never meet."""
    return ("model", namespace, model)


def _identity(meta: Mapping[str, Any]) -> Obj:
    identity = {key: meta.get(key) for key in ("name", "namespace", "uid", "resourceVersion", "generation")}
    identity["labels"] = dict(meta.get("labels") or {})
    return identity


class CachedKube:
    """The operator's door with watch-backed reads; writes and uncached reads go to `kube`.
    Reconciles of different models call it from several threads: each write record is one dict
    operation, and kopf changes an index only from its event loop."""

    def __init__(
        self,
        kube: ApplyingDoor,
        indexes: Mapping[CachedKind, Index],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self._serving = {(k.api_version, k.kind): i for k, i in indexes.items() if k in SERVING_KINDS}
        self._pods = indexes.get(PODS)
        self._clock = clock
        # (apiVersion, kind, namespace, name) → (applied hash of our write, when to stop waiting)
        self._writes: dict[tuple[str, str, str, str], tuple[str, float]] = {}

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        index = self._serving.get((api_version, kind))
        if index is not None:
            cached = _single(index, (namespace, name))
            if cached is not None and self._caught_up((api_version, kind, namespace, name), cached):
                return copy.deepcopy(cached)
        return self.kube.get(api_version, kind, namespace, name)

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[Obj]:
        terms = _equality_terms(label_selector) or {}
        model = terms.get(MODEL_LABEL)
        if (api_version, kind) == ("v1", "Pod"):
            index = self._pods
        elif terms.get(COMPONENT_LABEL) == SERVING_COMPONENT:  # applied with the hash, so indexed
            index = self._serving.get((api_version, kind))
        else:
            index = None
        if index is None or not terms or model is None:
            return self.kube.list(api_version, kind, namespace, label_selector)
        # Every object that matches carries the model label, so the index has seen it (within the
        # watch's delay, as a LIST would have within its own).
        return [
            copy.deepcopy(found)
            for found in _entries(index, _by_model(namespace, model))
            if all(found["metadata"]["labels"].get(k) == v for k, v in terms.items())
        ]

    def ensure(self, obj: Obj) -> bool:
        meta = obj["metadata"]
        key = (obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        index = self._serving.get(key[:2])
        if index is not None and key not in self._writes and not _entries(index, key[2:]):
            self.apply(obj)  # unseen, so absent (see Freshness): a GET would only say so
            return True
        return ensure_applied(self, obj)

    def apply(self, obj: Obj) -> Obj:
        stored = self.kube.apply(obj)
        meta = obj["metadata"]
        key = (obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        applied = (meta.get("annotations") or {}).get(APPLIED_HASH, "")
        self._writes[key] = (applied, self._clock() + WRITE_SETTLE_S)
        return stored

    def _caught_up(self, key: tuple[str, str, str, str], cached: Obj) -> bool:
        """Whether the index may answer for `key`: it has shown our last write, or waited long enough."""
        write = self._writes.get(key)
        if write is None:
            return True
        applied, until = write
        if cached["metadata"]["annotations"].get(APPLIED_HASH) == applied or self._clock() > until:
            self._writes.pop(key, None)
            return True
        return False

    def create(self, obj: Obj) -> Obj | None:
        return self.kube.create(obj)

    def add_owner(self, api_version: str, kind: str, live: Obj, owner: Obj) -> None:
        self.kube.add_owner(api_version, kind, live, owner)

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str) -> None:
        self.kube.delete(api_version, kind, namespace, name, uid)

    def pod_log(self, namespace: str, pod: str, container: str, tail_lines: int | None = None) -> str:
        return self.kube.pod_log(namespace, pod, container, tail_lines)

    def annotate_pod(self, namespace: str, name: str, key: str, value: str) -> None:
        self.kube.annotate_pod(namespace, name, key, value)

    def patch_status(self, namespace: str, name: str, status: Obj) -> None:
        self.kube.patch_status(namespace, name, status)

    def event(self, body: Obj, kind: str, reason: str, message: str) -> None:
        self.kube.event(body, kind, reason, message)


def _single(index: Index, key: tuple[str, str]) -> Obj | None:
    """The one object filed under `key`; None when there is none, or two (a deleted object and its
    successor, between their events), which the API server then settles."""
    found = _entries(index, key)
    return found[0] if len(found) == 1 else None


def _entries(index: Index, key: tuple[str, ...]) -> list[Obj]:
    try:
        return list(index[key])  # one copy: kopf, on its event loop, may change the entry meanwhile
    except KeyError:
        return []


def _equality_terms(selector: str) -> dict[str, str] | None:
    """`a=b,c=d` as a dict; None for any other selector form, which the API server then evaluates."""
    terms: dict[str, str] = {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        name, equals, value = term.partition("=")
        if not equals or name.endswith("!") or value.startswith("=") or " " in term:
            return None
        terms[name] = value
    return terms
