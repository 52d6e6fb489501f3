"""A list-and-watch cache of one resource kind, as plain dicts (like client-go's informer)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from kvant_contracts.kube_object import Obj

Key = tuple[str, str]
log = logging.getLogger("kvant.nodeagent.informer")
# What the Kubernetes client raises when the apiserver is down or goes away mid-request: urllib3's own
# errors (a watch cut short, retries used up) are neither ApiException nor OSError. The agent rides
# them out and retries, as a kubelet does an apiserver restart.
CONNECTION_ERRORS = (OSError, urllib3.exceptions.HTTPError)


def key_of(obj: Obj) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


class Informer:
    """Keeps `store` in sync with the apiserver and calls `on_change(obj, deleted)` per event."""

    def __init__(
        self,
        kind: str,
        list_fn: Callable[..., Any],
        on_change: Callable[[Obj, bool], None] | None = None,
        field_selector: str | None = None,
    ) -> None:
        self.kind = kind
        self._list_fn = list_fn
        self._on_change = on_change
        self._selector = {"field_selector": field_selector} if field_selector else {}
        self.store: dict[Key, Obj] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._watch: watch.Watch | None = None

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self.store.get((namespace, name))

    def in_namespace(self, namespace: str) -> list[Obj]:
        with self._lock:
            return [obj for (ns, _), obj in self.store.items() if ns == namespace]

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"informer-{self.kind}", daemon=True).start()

    def wait_synced(self, timeout: float = 30.0) -> bool:
        return self._synced.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch_from(self._relist())
            except (ApiException, ValueError, *CONNECTION_ERRORS) as err:
                log.warning("%s watch interrupted (%s); relisting", self.kind, err)
            self._stop.wait(1.0)

    def _relist(self) -> str:
        response = self._list_fn(_preload_content=False, **self._selector)
        body = json.loads(response.data)
        fresh = {key_of(item): item for item in body["items"]}
        with self._lock:
            gone = [obj for key, obj in self.store.items() if key not in fresh]
            self.store = fresh
        for obj in gone:
            self._notify(obj, True)
        for obj in fresh.values():
            self._notify(obj, False)
        self._synced.set()
        rv: str = body["metadata"]["resourceVersion"]
        return rv

    def _watch_from(self, resource_version: str) -> None:
        self._watch = watch.Watch()
        stream = self._watch.stream(
            self._list_fn, resource_version=resource_version, timeout_seconds=300, **self._selector
        )
        for event in stream:
            if self._stop.is_set():
                return
            kind, obj = event["type"], event["raw_object"]
            if kind == "ERROR":
                raise ValueError(f"watch error: {obj.get('message')}")
            deleted = kind == "DELETED"
            with self._lock:
                if deleted:
                    self.store.pop(key_of(obj), None)
                else:
                    self.store[key_of(obj)] = obj
            self._notify(obj, deleted)

    def _notify(self, obj: Obj, deleted: bool) -> None:
        if self._on_change is not None:
            try:
                self._on_change(obj, deleted)
            except Exception:  # a handler bug must not kill the watch
                log.exception("%s handler failed for %s", self.kind, key_of(obj))
