"""Names, labels, owner references and the applied-hash annotation every rendered object carries."""

from __future__ import annotations

import copy

from kvant_contracts.kube_object import Obj
from kvant_operator.api.resource import API_VERSION, KIND
from kvant_operator.hashing import digest
from kvant_operator.object_keys import APPLIED_HASH, COMPONENT_LABEL, MANAGED_BY, MODEL_LABEL


def model_labels(model: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "kvant",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/instance": model,
        COMPONENT_LABEL: component,
        MODEL_LABEL: model,
    }


def owner_reference(body: Obj, controller: bool = True) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": body["metadata"]["name"],
        "uid": body["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def object_meta(body: Obj, name: str, component: str, *, controller: bool = True) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": body["metadata"]["namespace"],
        "labels": model_labels(body["metadata"]["name"], component),
    }
    if body["metadata"].get("uid"):  # absent when `kvant render` works from a file
        meta["ownerReferences"] = [owner_reference(body, controller)]
    return meta


def with_applied_hash(obj: Obj) -> Obj:
    """Stamps a hash of the desired object, so the operator can skip applies that change nothing."""
    stamped = copy.deepcopy(obj)
    stamped["metadata"].setdefault("annotations", {})[APPLIED_HASH] = digest(obj)
    return stamped


def record_configmap(
    body: Obj, name: str, component: str, label: tuple[str, str], payload: tuple[str, str]
) -> Obj:
    """A record ConfigMap (`payload` is its one key and JSON text). It has no owner on purpose: a
    record outlives the models that made it, so a later model with the same key reuses the work."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": body["metadata"]["namespace"],
            "labels": {**model_labels(body["metadata"]["name"], component), label[0]: label[1]},
        },
        "data": {payload[0]: payload[1]},
    }
