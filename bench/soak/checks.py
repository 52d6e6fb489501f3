"""The soak's invariants, each read from the cluster or the artifacts volume as it stands.

- `whole`: a served model is back: its QuantizedModel Ready for its generation, every engine pod and
  router Ready, each router listing every engine (from one pod listing);
- `JobLedger`: no Job made twice for one attempt (the same name with a new uid, or two Jobs for one
  artifact or source key and attempt);
- `ArtifactLedger`: every published folder on the volume checks against its manifest (sizes and
  sha256), no manifest is written again once published, and every record names a published folder
  of its digest;
- `RetractionLedger`: each model's engine retractions (its pods' counters, summed across restarts);
- `leftovers`: what the models left after their deletion (records excepted: they outlive models on
  purpose, docs/concepts/pipeline.md), and unfinished staging folders on the volume.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import urllib3
from bench.soak.load import check_local
from bench.soak.stage import NS, Scene, Served
from e2e.qm import get_qm, is_true, metrics_url
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvant_contracts.artifact_manifest import MANIFEST_NAME, ManifestError, verify_artifact
from kvant_contracts.serving_pod import GATE_PORT
from kvant_dev.faults import FILL_FILE
from kvant_dev.loadgen import engine_retractions
from kvant_operator.render.artifact_record import read_record
from kvant_operator.render.fetch_job import SOURCE_LABEL, read_source_record
from kvant_operator.render.jobs import ARTIFACT_LABEL, ATTEMPT_ANNOTATION
from kvant_operator.render.meta import MODEL_LABEL
from kvant_operator.render.roles import KIND_LABEL, RoleKind

# A poll that meets the apiserver (or etcd behind it) down: not back yet.
API_DOWN = (ApiException, urllib3.exceptions.HTTPError, OSError)
COMPONENT = "app.kubernetes.io/component"
RECORDS = ("artifact-record", "source-record")
PVC_PREFIX = "pvc://kvant-artifacts/"


def pods(scene: Scene) -> list[client.V1Pod]:
    """The namespace's pods that are not being deleted."""
    found = client.CoreV1Api(scene.api()).list_namespaced_pod(NS).items
    return [p for p in found if p.metadata.deletion_timestamp is None]


def of(listing: list[client.V1Pod], model: str, kind: RoleKind) -> list[client.V1Pod]:
    labels = {MODEL_LABEL: model, KIND_LABEL: kind.value}
    return [p for p in listing if labels.items() <= (p.metadata.labels or {}).items()]


def pod_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def whole(scene: Scene, served: Served, listing: list[client.V1Pod]) -> bool:
    qm = get_qm(scene.cluster, NS, served.name)
    status = qm.get("status") or {}
    if status.get("observedGeneration") != qm["metadata"]["generation"] or not is_true(qm, "Ready"):
        return False
    engines, routers = of(listing, served.name, RoleKind.ENGINE), of(listing, served.name, RoleKind.ROUTER)
    return (
        len(engines) == served.replicas
        and all(pod_ready(p) for p in engines)
        and len(routers) == served.routers
        and all(
            pod_ready(p) and p.metadata.uid not in scene.gone and workers(p) == served.replicas
            for p in routers
        )
    )


def ready(scene: Scene, name: str) -> bool:
    """A model (of any kind) Ready for its generation."""
    qm = get_qm(scene.cluster, NS, name)
    status = qm.get("status") or {}
    return status.get("observedGeneration") == qm["metadata"]["generation"] and is_true(qm, "Ready")


def workers(router: client.V1Pod) -> int:
    """How many engines this router has registered (smg's /workers); -1 when it does not answer."""
    try:
        url = check_local(f"http://{router.status.pod_ip}:{GATE_PORT}/workers")
        with urllib.request.urlopen(url, timeout=5) as answer:
            return len(json.load(answer).get("workers", []))
    except (OSError, ValueError):
        return -1


def started_since(pod: client.V1Pod, container: str, wall: float) -> bool:
    """Whether `container` of `pod` runs, started at `wall` (time.time()) or later (whole seconds)."""
    status = next((s for s in pod.status.container_statuses or [] if s.name == container), None)
    running = status.state.running if status is not None and status.state is not None else None
    return running is not None and running.started_at.timestamp() >= int(wall)


@dataclass
class JobLedger:
    names: dict[str, str] = field(default_factory=dict)  # Job name -> uid, for the whole soak

    def check(self, scene: Scene) -> list[str]:
        found: list[str] = []
        attempts: dict[tuple[str, str, str], str] = {}
        for job in client.BatchV1Api(scene.api()).list_namespaced_job(NS).items:
            meta = job.metadata
            if self.names.setdefault(meta.name, meta.uid) != meta.uid:
                found.append(f"Job {meta.name} created again (uid {meta.uid}, was {self.names[meta.name]})")
                self.names[meta.name] = meta.uid
            labels, annotations = meta.labels or {}, meta.annotations or {}
            key = labels.get(ARTIFACT_LABEL) or labels.get(SOURCE_LABEL)
            if key is None or meta.deletion_timestamp is not None:
                continue
            attempt = (labels.get(COMPONENT, ""), key, annotations.get(ATTEMPT_ANNOTATION, "?"))
            if meta.name.endswith("-shards"):
                attempt = (attempt[0] + "-shards", *attempt[1:])
            if (other := attempts.setdefault(attempt, meta.name)) != meta.name:
                found.append(f"two Jobs for {attempt[0]} {key} attempt {attempt[2]}: {other}, {meta.name}")
        return found


@dataclass
class ArtifactLedger:
    published: dict[Path, tuple[int, int, str]] = field(
        default_factory=dict
    )  # manifest -> inode, mtime, digest

    def check(self, scene: Scene) -> list[str]:
        found: list[str] = []
        for manifest in sorted(scene.artifacts.rglob(MANIFEST_NAME)):
            folder = manifest.parent
            try:
                digest = verify_artifact(folder, None, content=True).digest
                stat = manifest.stat()
            except (ManifestError, OSError) as err:
                found.append(f"{self._name(scene, folder)} published partly: {err}")
                continue
            seen = self.published.setdefault(manifest, (stat.st_ino, stat.st_mtime_ns, digest))
            if seen != (stat.st_ino, stat.st_mtime_ns, digest):
                found.append(f"{self._name(scene, folder)} published twice ({seen[2]}, then {digest})")
                self.published[manifest] = (stat.st_ino, stat.st_mtime_ns, digest)
        for location, digest in records(scene):
            folder = scene.artifacts / location.removeprefix(PVC_PREFIX)
            if not (folder / MANIFEST_NAME).is_file():
                found.append(f"record names {location}, which is not published")
            elif self.published.get(folder / MANIFEST_NAME, (0, 0, digest))[2] != digest:
                found.append(f"record names {location} with {digest}, the folder holds another digest")
        return found

    @staticmethod
    def _name(scene: Scene, folder: Path) -> str:
        return PVC_PREFIX + str(folder.relative_to(scene.artifacts))


def records(scene: Scene) -> list[tuple[str, str]]:
    """(location, digest) of every artifact and source record in the namespace."""
    selector = f"{COMPONENT} in ({','.join(RECORDS)})"
    found = []
    for cm in client.CoreV1Api(scene.api()).list_namespaced_config_map(NS, label_selector=selector).items:
        body = {"data": cm.data or {}}
        if cm.metadata.labels.get(COMPONENT) == "artifact-record":
            artifact = read_record(body)
            found.append((artifact.uri, artifact.digest or ""))
        else:
            source = read_source_record(body)
            found.append((source.location, source.digest))
    return found


@dataclass
class RetractionLedger:
    last: dict[str, float] = field(default_factory=dict)  # engine run (pod uid + start) -> counter

    def read(self, scene: Scene, served: Iterable[Served]) -> dict[str, float]:
        """Each model's retractions since the last read (a restarted engine counts from zero again)."""
        listing = pods(scene)
        grown: dict[str, float] = {}
        for model in served:
            grown[model.name] = 0.0
            for pod in of(listing, model.name, RoleKind.ENGINE):
                engine = next((s for s in pod.status.container_statuses or [] if s.name == "engine"), None)
                if engine is None or engine.state is None or engine.state.running is None:
                    continue
                run = f"{pod.metadata.uid}/{engine.state.running.started_at}"
                try:
                    total = engine_retractions(check_local(metrics_url(pod)))
                except OSError:
                    continue
                grown[model.name] += total - self.last.get(run, 0.0)
                self.last[run] = total
        return grown


def leftovers(scene: Scene, models: list[str]) -> list[str]:
    """Objects the deleted `models` still own, and staging folders left on the artifacts volume."""
    api = scene.api()
    selector = f"{MODEL_LABEL} in ({','.join(models)}),{COMPONENT} notin ({','.join(RECORDS)})"
    core, apps, batch, policy = (
        client.CoreV1Api(api),
        client.AppsV1Api(api),
        client.BatchV1Api(api),
        client.PolicyV1Api(api),
    )
    rbac, networking = client.RbacAuthorizationV1Api(api), client.NetworkingV1Api(api)
    listed = {
        "deployments": apps.list_namespaced_deployment(NS, label_selector=selector).items,
        "services": core.list_namespaced_service(NS, label_selector=selector).items,
        "configmaps": core.list_namespaced_config_map(NS, label_selector=selector).items,
        "jobs": batch.list_namespaced_job(NS, label_selector=selector).items,
        "pods": core.list_namespaced_pod(NS, label_selector=selector).items,
        "poddisruptionbudgets": policy.list_namespaced_pod_disruption_budget(
            NS, label_selector=selector
        ).items,
        "serviceaccounts": core.list_namespaced_service_account(NS, label_selector=selector).items,
        "roles": rbac.list_namespaced_role(NS, label_selector=selector).items,
        "rolebindings": rbac.list_namespaced_role_binding(NS, label_selector=selector).items,
        "networkpolicies": networking.list_namespaced_network_policy(NS, label_selector=selector).items,
    }
    found = [f"{kind}/{o.metadata.name}" for kind, objs in listed.items() for o in objs]
    for root, dirs, files in os.walk(scene.artifacts):
        found += [
            f"staging {Path(root, d).relative_to(scene.artifacts)}"
            for d in dirs
            if d.startswith(".kvant-partial")
        ]
        dirs[:] = [d for d in dirs if not d.startswith(".kvant-partial")]
        found += [
            f"file {Path(root, f).relative_to(scene.artifacts)}"
            for f in files
            if f == FILL_FILE or f.endswith(".part")
        ]
    return found
