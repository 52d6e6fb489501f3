"""An in-memory `KubeDoor` for reconcile-step tests: a small fake of the operator's own door (get, list,
apply, create, owners, logs, status, events), not of the kubernetes client.

It keeps objects by (apiVersion, kind, namespace, name), selects by equality and existence label
selectors, and lets a test play the cluster's part: finish a Job (with the pod and logs its
containers would leave) or report a Deployment's rollout.
"""

from __future__ import annotations

import builtins
import copy
import itertools

from kvant_contracts.kube_object import Obj
from kvant_operator.kube_door import ensure_applied

Key = tuple[str, str, str, str]


class MemoryKube:
    def __init__(self) -> None:
        self.objects: dict[Key, Obj] = {}
        self.logs: dict[tuple[str, str, str], str] = {}
        self.applied: list[Key] = []
        self.created: list[Key] = []
        self.deleted: list[Key] = []
        self.statuses: list[Obj] = []
        self.events: list[tuple[str, str, str]] = []
        self.annotated: list[tuple[str, str, str]] = []  # (pod, key, value), in order
        self._uids = itertools.count(1)

    # -- the door ----------------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Obj | None:
        found = self.objects.get((api_version, kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[Obj]:
        return [
            copy.deepcopy(obj)
            for (v, k, ns, _), obj in sorted(self.objects.items())
            if (v, k, ns) == (api_version, kind, namespace)
            and matches(obj["metadata"].get("labels") or {}, label_selector)
        ]

    def ensure(self, obj: Obj) -> bool:
        return ensure_applied(self, obj)

    def apply(self, obj: Obj) -> Obj:
        key = _key(obj)
        live = self.objects.get(key)
        stored = copy.deepcopy(obj)
        if live is not None:  # an apply replaces the spec; the status belongs to the cluster
            stored["metadata"]["generation"] = live["metadata"].get("generation", 1) + 1
            stored["metadata"]["uid"] = live["metadata"].get("uid")
            if "status" in live:
                stored["status"] = live["status"]
        else:
            stored["metadata"].update(generation=1, uid=f"uid-{next(self._uids)}")
        self.objects[key] = stored
        self.applied.append(key)
        return copy.deepcopy(stored)

    def delete(self, api_version: str, kind: str, namespace: str, name: str, uid: str) -> None:
        key = (api_version, kind, namespace, name)
        if key in self.objects and self.objects[key]["metadata"].get("uid", "") == uid:
            del self.objects[key]
            self.deleted.append(key)

    def create(self, obj: Obj) -> Obj | None:
        key = _key(obj)
        if key in self.objects:
            return None
        stored = copy.deepcopy(obj)
        stored["metadata"].update(uid=f"uid-{next(self._uids)}", resourceVersion="1")
        self.objects[key] = stored
        self.created.append(key)
        return copy.deepcopy(stored)

    def add_owner(self, api_version: str, kind: str, live: Obj, owner: Obj) -> None:
        stored = self.objects[(api_version, kind, live["metadata"]["namespace"], live["metadata"]["name"])]
        owners = stored["metadata"].setdefault("ownerReferences", [])
        if all(o.get("uid") != owner["uid"] for o in owners):
            owners.append(owner)

    def pod_log(self, namespace: str, pod: str, container: str, tail_lines: int | None = None) -> str:
        lines = self.logs.get((namespace, pod, container), "").splitlines()
        return "\n".join(lines[-tail_lines:] if tail_lines else lines)

    def annotate_pod(self, namespace: str, name: str, key: str, value: str) -> None:
        stored = self.objects[("v1", "Pod", namespace, name)]
        stored["metadata"].setdefault("annotations", {})[key] = value
        self.annotated.append((name, key, value))

    def patch_status(self, namespace: str, name: str, status: Obj) -> None:
        self.statuses.append(status)

    def event(self, body: Obj, kind: str, reason: str, message: str) -> None:
        self.events.append((kind, reason, message))

    # -- the cluster's part -------------------------------------------------------------------------------

    def jobs(self, namespace: str) -> builtins.list[str]:
        return sorted(name for (_, kind, ns, name) in self.objects if kind == "Job" and ns == namespace)

    def finish_job(
        self,
        namespace: str,
        name: str,
        logs: dict[str, str],
        failed: str | None = None,
        at: str = "2026-11-30T12:00:00Z",
    ) -> None:
        """Completes Job `name` (or fails it with container `failed` exiting 1) and leaves one pod
        whose containers printed `logs`."""
        job = self.objects[("batch/v1", "Job", namespace, name)]
        condition = "Failed" if failed else "Complete"
        job["status"] = {"conditions": [{"type": condition, "status": "True", "lastTransitionTime": at}]}
        self.run_pod(namespace, name, logs, failed)

    def run_pod(self, namespace: str, job: str, logs: dict[str, str], failed: str | None = None) -> None:
        """A pod of Job `job` whose containers (in the order of `logs`) started and printed `logs`."""
        pod = f"{job}-{next(self._uids)}"
        statuses = [{"name": c, "state": {"terminated": {"exitCode": 1 if c == failed else 0}}} for c in logs]
        self.objects[("v1", "Pod", namespace, pod)] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod,
                "namespace": namespace,
                "labels": {"job-name": job},
                "creationTimestamp": f"2026-11-30T12:00:{len(self.objects) % 60:02d}Z",
            },
            "status": {"containerStatuses": statuses},
        }
        for container, text in logs.items():
            self.logs[(namespace, pod, container)] = text

    def roll_out(self, namespace: str, name: str) -> None:
        """The Deployment controller's part: every desired replica updated and ready."""
        deployment = self.objects[("apps/v1", "Deployment", namespace, name)]
        replicas = deployment["spec"]["replicas"]
        deployment["status"] = {
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
        }


def _key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])


def matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if term.startswith("!"):
            if term[1:] in labels:
                return False
        elif "=" in term:
            name, _, value = term.partition("=")
            if labels.get(name) != value:
                return False
        elif term not in labels:
            return False
    return True
