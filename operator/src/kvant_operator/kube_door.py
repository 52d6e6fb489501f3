"""The operator's door to the cluster, as a protocol: what reconcile steps and protection may ask for.

`kube.Kube` is the real door (the kubernetes client); `kube_cache.CachedKube` wraps it and answers a
settled model's reads from watch-backed indexes. Tests of reconcile steps use a small in-memory door of
the same shape, so a step can be exercised without an API server and without faking the kubernetes
client itself.
"""

from __future__ import annotations

from typing import Protocol

from kvant_contracts.kube_object import Obj
from kvant_operator.object_keys import APPLIED_HASH


class KubeDoor(Protocol):
    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None: ...

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[Obj]: ...

    def ensure(self, obj: Obj) -> bool:
        """Applies `obj` unless the live object already carries its applied hash; True when applied."""
        ...

    def create(self, obj: Obj) -> Obj | None:
        """Creates `obj`; None when it already exists (names are deterministic, so that is success)."""
        ...

    def add_owner(self, api_version: str, kind: str, live: Obj, owner: Obj) -> None: ...

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str) -> None:
        """Deletes the object if it is still the one with `uid` (a precondition): a successor of the
        same name is never deleted by mistake. Gone already is success."""
        ...

    def pod_log(self, namespace: str, pod: str, container: str, tail_lines: int | None = None) -> str: ...

    def annotate_pod(self, namespace: str, name: str, key: str, value: str) -> None:
        """Sets one annotation on a pod (the only write Kvant makes to a pod: reconcile/scale_in)."""
        ...

    def patch_status(self, namespace: str, name: str, status: Obj) -> None: ...

    def event(self, body: Obj, kind: str, reason: str, message: str) -> None: ...


class ApplyingDoor(KubeDoor, Protocol):
    """A door that can server-side apply, which `ensure_applied` builds `ensure` on."""

    def apply(self, obj: Obj) -> Obj:
        """Server-side applies `obj` and returns the object as stored."""
        ...


def ensure_applied(door: ApplyingDoor, obj: Obj) -> bool:
    """Applies `obj` unless the live object, as `door.get` sees it, already carries its applied hash.
    The one place that decides to skip an apply, whether `get` asks the API server or a cache."""
    meta = obj["metadata"]
    wanted = (meta.get("annotations") or {}).get(APPLIED_HASH)
    live = door.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
    if (
        live is not None
        and wanted
        and (live["metadata"].get("annotations") or {}).get(APPLIED_HASH) == wanted
    ):
        return False
    door.apply(obj)
    return True
