"""The operator's door to the cluster, as a protocol: what reconcile steps and protection may ask for.

`kube.Kube` is the real door (the kubernetes client). Tests of reconcile steps use a small in-memory
door of the same shape, so a step can be exercised without an API server and without faking the
kubernetes client itself.
"""

from __future__ import annotations

from typing import Any, Protocol

Obj = dict[str, Any]


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

    def pod_log(self, namespace: str, pod: str, container: str, tail_lines: int | None = None) -> str: ...

    def patch_status(self, namespace: str, name: str, status: Obj) -> None: ...

    def event(self, body: Obj, kind: str, reason: str, message: str) -> None: ...
