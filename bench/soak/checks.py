"""The soak's invariants, each read from the cluster or the artifacts volume as it stands.

- `missing`: what keeps a served model from being whole ("" once it is): its QuantizedModel Ready
  for its generation, every engine pod and router Ready, each router listing every engine (from one
  pod listing);
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

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bench.soak.load import NotLocalError, check_local
from bench.soak.stage import NS, Scene, Served
from e2e.qm import get_qm, metrics_url, owned_objects, pod_ready, ready_for_generation, router_workers
from kubernetes import client

from kvant_contracts.artifact_manifest import MANIFEST_NAME, ManifestError, verify_artifact
from kvant_contracts.serving_pod import GATE_PORT
from kvant_dev.faults import FILL_FILE
from kvant_dev.loadgen import EngineMetricsMissing, engine_retractions
from kvant_operator.object_keys import (
    ARTIFACT_LABEL,
    ATTEMPT_ANNOTATION,
    KIND_LABEL,
    MODEL_LABEL,
    SOURCE_LABEL,
)
from kvant_operator.render.artifact_record import read_record
from kvant_operator.render.fetch_job import read_source_record
from kvant_operator.render.roles import RoleKind

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


def missing(scene: Scene, served: Served, listing: list[client.V1Pod]) -> str:
    """What keeps a served model from being whole, in words ("" when it is): the model not Ready for
    its generation, engine or router pods not there or not ready, a router not listing every engine."""
    if not ready(scene, served.name):
        return f"{served.name} not Ready for its generation"
    engines, routers = of(listing, served.name, RoleKind.ENGINE), of(listing, served.name, RoleKind.ROUTER)
    if len(engines) != served.replicas or len(routers) != served.routers:
        return f"{served.name}: {len(engines)} engine and {len(routers)} router pods"
    gaps = [f"{p.metadata.name} not ready" for p in [*engines, *routers] if not pod_ready(p)]
    gaps += [f"{p.metadata.name} deleted by the fault" for p in routers if p.metadata.uid in scene.gone]
    for router in routers:
        if router.metadata.uid not in scene.gone and pod_ready(router):
            listed = workers(router)
            if listed != served.replicas:
                gaps.append(f"{router.metadata.name} lists {listed} engines")
    return "; ".join(gaps)


def ready(scene: Scene, name: str) -> bool:
    """A model (of any kind) Ready for its generation."""
    return ready_for_generation(get_qm(scene.cluster, NS, name))


def workers(router: client.V1Pod) -> int:
    """How many engines this router has registered (smg's /workers); -1 when it does not answer, or
    when its address is not the local cluster's (the soak sends nowhere else)."""
    try:
        check_local(f"http://{router.status.pod_ip}:{GATE_PORT}/workers")
    except NotLocalError:
        return -1
    return router_workers(router)


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
                except (OSError, EngineMetricsMissing):  # skipped: read again next time
                    continue
                grown[model.name] += total - self.last.get(run, 0.0)
                self.last[run] = total
        return grown


def leftovers(scene: Scene, models: list[str]) -> list[str]:
    """Objects the deleted `models` still own, and staging folders left on the artifacts volume."""
    selector = f"{MODEL_LABEL} in ({','.join(models)}),{COMPONENT} notin ({','.join(RECORDS)})"
    owned = owned_objects(scene.api(), NS, selector)
    found = [f"{kind}/{name}" for kind, names in owned.items() for name in names]
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
