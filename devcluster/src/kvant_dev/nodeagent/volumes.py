"""Pod volumes as host folders: emptyDir, hostPath, PVCs on hostPath/local PVs, and
ConfigMap/Secret/downwardAPI/projected files refreshed in place like the kubelet
(new content goes to a fresh folder and the `..data` symlink is swapped atomically).

ConfigMap and Secret content reaches a running pod's volume late, as on a kubelet: a real kubelet
rewrites these volumes only on the pod's periodic sync (`--sync-frequency`, 1 min by default,
jittered up to 1.5x) from its object cache, so an edit shows up anywhere from seconds to about
90 s later. Here a changed object is projected `projection_delay` seconds after the agent first
sees the change (at the pod's next sync after that), always the full delay rather than a random
part of it, so code that relies on quick projection fails on every run here rather than now and
then in production. A pod that starts gets the current content at once, as on a kubelet.
ServiceAccount tokens and downward-API files keep being refreshed on every sync.

hostPath and local PV paths are the node's paths: they resolve below the node's own root
(`node_root`, inside the cluster's folder), as a kind node's paths live in its container. A path
that is missing fails the pod as the kubelet does; only `DirectoryOrCreate` and `FileOrCreate`
create one, and only once it is known to stay inside the node's root."""

from __future__ import annotations

import base64
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kvant_contracts.kube_object import Obj
from kvant_dev.nodeagent.fieldrefs import Lookup, field_value, object_data

TokenSource = Callable[[Obj, Obj], tuple[str, float]]  # (pod, projection) -> (token, expires_at)
_REFRESHED = ("configMap", "secret", "downwardAPI", "projected")
# A kubelet's default --sync-frequency: the agent's default projection delay (see above).
KUBELET_SYNC_SECONDS = 60.0
# hostPath type -> (the check the kubelet makes, what it expects); an empty type checks existence only.
_HOST_PATH_TYPES: dict[str, tuple[Callable[[Path], bool], str]] = {
    "Directory": (Path.is_dir, "a directory"),
    "DirectoryOrCreate": (Path.is_dir, "a directory"),
    "File": (Path.is_file, "a file"),
    "FileOrCreate": (Path.is_file, "a file"),
}


class VolumeNotReadyError(RuntimeError):
    """A volume cannot be set up yet (missing object, unbound claim); the pod waits."""


@dataclass
class PodVolumes:
    pod: Obj
    root: Path
    node_root: Path
    lookup: Lookup
    token_source: TokenSource
    projection_delay: float  # seconds before a changed ConfigMap or Secret reaches the volume
    clock: Callable[[], float] = time.monotonic
    host_paths: dict[str, Path] = field(default_factory=dict)
    read_only: dict[str, bool] = field(default_factory=dict)
    _written: dict[str, dict[str, bytes]] = field(default_factory=dict)
    _tokens: dict[tuple[str, str], tuple[str, float]] = field(default_factory=dict)
    _objects: dict[tuple[str, str], _Projection] = field(default_factory=dict)  # by (kind, name)

    def setup(self) -> None:
        for volume in self.pod["spec"].get("volumes", []):
            self.host_paths[volume["name"]] = self._materialize(volume)

    def refresh(self) -> None:
        """Rewrite file-backed volumes whose source objects changed since the last write."""
        for volume in self.pod["spec"].get("volumes", []):
            if any(kind in volume for kind in _REFRESHED):
                self._write_files(volume["name"], self._files_for(volume))

    def _materialize(self, volume: Obj) -> Path:
        name = str(volume["name"])
        if "emptyDir" in volume:
            path = self.root / "empty" / name
            path.mkdir(parents=True, exist_ok=True)
            return path
        if "hostPath" in volume:
            host_path = volume["hostPath"]
            return self._node_path(f"volume {name!r}", host_path["path"], host_path.get("type") or "")
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]
            self.read_only[name] = bool(claim.get("readOnly", False))
            return self._claim_path(str(claim["claimName"]))
        if any(kind in volume for kind in _REFRESHED):
            self._write_files(name, self._files_for(volume))
            return file_volume_dir(self.root, name)
        raise VolumeNotReadyError(
            f"volume {name!r}: type {sorted(set(volume) - {'name'})} is not supported locally"
        )

    def _claim_path(self, claim_name: str) -> Path:
        namespace = self.pod["metadata"]["namespace"]
        claim = self.lookup("PersistentVolumeClaim", namespace, claim_name)
        if claim is None:
            raise VolumeNotReadyError(f"PersistentVolumeClaim {namespace}/{claim_name} not found")
        pv_name = claim.get("spec", {}).get("volumeName")
        pv = self.lookup("PersistentVolume", "", pv_name) if pv_name else None
        if pv is None:
            raise VolumeNotReadyError(f"PersistentVolumeClaim {namespace}/{claim_name} is not bound yet")
        source = pv["spec"].get("hostPath") or pv["spec"].get("local")
        if not source:
            raise VolumeNotReadyError(f"PersistentVolume {pv_name} is neither hostPath nor local")
        return self._node_path(f"PersistentVolume {pv_name}", source["path"], source.get("type") or "")

    def _node_path(self, what: str, node_path: str, kind: str) -> Path:
        """A node path's folder on this machine, checked against its hostPath type."""
        relative = PurePosixPath(node_path)
        if not relative.is_absolute() or ".." in relative.parts:
            raise VolumeNotReadyError(f"{what}: hostPath {node_path!r} must be absolute, without '..'")
        path = self.node_root / str(relative).lstrip("/")
        # Checked before anything is created: a symlink in the node's tree must not lead a mkdir out.
        existing = path
        while not existing.exists() and existing != self.node_root:
            existing = existing.parent
        if not existing.resolve().is_relative_to(self.node_root.resolve()):
            raise VolumeNotReadyError(f"{what}: hostPath {node_path!r} leads outside the node's filesystem")
        if kind == "DirectoryOrCreate":
            path.mkdir(parents=True, exist_ok=True)
        elif kind == "FileOrCreate":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(exist_ok=True)
        check, expected = _HOST_PATH_TYPES.get(kind, (Path.exists, "an existing path"))
        if not check(path):
            raise VolumeNotReadyError(
                f"MountVolume.SetUp failed for {what}: hostPath type check failed: {node_path} is not "
                f"{expected} on the node (node paths live under {self.node_root})"
            )
        return path

    def _files_for(self, volume: Obj) -> dict[str, bytes]:
        if "projected" in volume:
            files: dict[str, bytes] = {}
            for source in volume["projected"].get("sources", []):
                files.update(self._source_files(source))
            return files
        return self._source_files(volume)

    def _source_files(self, source: Obj) -> dict[str, bytes]:
        namespace = self.pod["metadata"]["namespace"]
        for kind, key, name_field in (("ConfigMap", "configMap", "name"), ("Secret", "secret", "secretName")):
            if key in source:
                ref = source[key]
                ref_name = ref.get(name_field) or ref.get("name")
                obj = self.lookup(kind, namespace, ref_name)
                shown = self._objects.get((kind, ref_name))
                if obj is None and shown is not None:
                    return _select_items(shown.data, ref.get("items"))  # deleted: the last content stays
                if obj is None and not ref.get("optional"):
                    raise VolumeNotReadyError(f"{kind} {namespace}/{ref_name} not found")
                data = _raw_data(obj) if obj is not None else {}
                return _select_items(self._projected(kind, ref_name, data), ref.get("items"))
        if "downwardAPI" in source:
            return {
                item["path"]: field_value(self.pod, item["fieldRef"]["fieldPath"]).encode()
                for item in source["downwardAPI"].get("items", [])
                if "fieldRef" in item
            }
        if "serviceAccountToken" in source:
            projection = source["serviceAccountToken"]
            return {projection["path"]: self._token(projection).encode()}
        raise VolumeNotReadyError(f"volume source {sorted(source)} is not supported locally")

    def _projected(self, kind: str, name: str, data: dict[str, bytes]) -> dict[str, bytes]:
        """An object's data as the pod's volumes show it: the current data when first mounted, then a
        change only once it has waited `projection_delay` (edits meanwhile join it: the sync that
        comes due writes whatever is current then, so a stream of edits cannot hold one back)."""
        now = self.clock()
        shown = self._objects.get((kind, name))
        if shown is None:
            self._objects[(kind, name)] = _Projection(data)
            return data
        if data == shown.data:
            shown.changed_at = None
        elif shown.changed_at is None:
            shown.changed_at = now
        if shown.changed_at is not None and now - shown.changed_at >= self.projection_delay:
            shown.data, shown.changed_at = data, None
        return shown.data

    def _token(self, projection: Obj) -> str:
        cache_key = (projection.get("audience", ""), projection["path"])
        token, expires_at = self._tokens.get(cache_key, ("", 0.0))
        lifetime = float(projection.get("expirationSeconds", 3600))
        if time.time() > expires_at - 0.2 * lifetime:  # refresh at 80% of life, like the kubelet
            token, expires_at = self.token_source(self.pod, projection)
            self._tokens[cache_key] = (token, expires_at)
        return token

    def _write_files(self, name: str, files: dict[str, bytes]) -> None:
        if self._written.get(name) == files:
            return
        target = file_volume_dir(self.root, name)
        target.mkdir(parents=True, exist_ok=True)
        stamp = f"..{time.time_ns()}"
        for rel, content in files.items():
            path = target / stamp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        tmp_link = target / "..data_tmp"
        tmp_link.unlink(missing_ok=True)
        tmp_link.symlink_to(stamp)
        os.replace(tmp_link, target / "..data")
        for rel in {r.split("/", 1)[0] for r in files}:
            link = target / rel
            if not link.is_symlink():
                link.symlink_to(Path("..data") / rel)
        for old in target.glob("..[0-9]*"):
            if old.name != stamp:
                shutil.rmtree(old, ignore_errors=True)
        self._written[name] = files


def file_volume_dir(pod_dir: Path, volume: str) -> Path:
    """Where a pod's ConfigMap, Secret, downward-API or projected volume lives, as its containers see it."""
    return pod_dir / "files" / volume


@dataclass
class _Projection:
    """One ConfigMap's or Secret's data as the pod's volumes show it, and since when it differs from
    the object's (None while it does not)."""

    data: dict[str, bytes]
    changed_at: float | None = None


def _raw_data(obj: Obj) -> dict[str, bytes]:
    if "type" in obj:  # Secret data is base64 on the wire
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    data = {k: v.encode() for k, v in object_data(obj).items()}
    data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return data


def _select_items(data: dict[str, bytes], items: list[Obj] | None) -> dict[str, bytes]:
    if not items:
        return data
    return {item["path"]: data[item["key"]] for item in items if item["key"] in data}
