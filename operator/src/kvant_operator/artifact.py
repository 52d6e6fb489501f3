"""Artifacts: the content-addressed key of a conversion recipe, and where sources and artifacts live.

Two QuantizedModels with the same recipe share one key, hence one Job and one artifact.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from kvant_contracts.weight_formats import weight_format
from kvant_operator.api.spec import KvScales, QuantizedModelSpec
from kvant_operator.settings import OperatorSettings

SOURCE_MOUNT = "/source"
ARTIFACT_MOUNT = "/artifacts"


class UnsupportedSourceError(ValueError):
    pass


def digest(data: Any, length: int = 16) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def needs_conversion(spec: QuantizedModelSpec) -> bool:
    return weight_format(spec.weights.format.value).converts


def needs_calibration(spec: QuantizedModelSpec) -> bool:
    return spec.kv_cache.dtype.is_fp8 and spec.kv_cache.scales is KvScales.CALIBRATE


def needs_artifact(spec: QuantizedModelSpec) -> bool:
    return needs_conversion(spec) or needs_calibration(spec)


def artifact_key(spec: QuantizedModelSpec, settings: OperatorSettings) -> str:
    """Hash of everything that changes the artifact's bytes (source, weights, KV calibration, converter)
    and of where it is written, so models sharing a key always share the same files."""
    weights = spec.weights.model_dump(mode="json", by_alias=True)
    calibration = spec.kv_cache.calibration
    calibration_recipe = (
        calibration.model_dump(mode="json") if calibration and needs_calibration(spec) else None
    )
    recipe = {
        "source": {"uri": spec.source.uri, "revision": spec.source.revision},
        "weights": weights
        if needs_conversion(spec)
        else {"format": spec.weights.format.value, "output": weights.get("output")},
        "kvCalibration": {"dtype": spec.kv_cache.dtype.value, "calibration": calibration_recipe},
        "converter": settings.converter_version,
    }
    return digest(recipe)


@dataclass(frozen=True)
class Location:
    """A folder reachable from pods: a volume, where it is mounted, and the path below the mount."""

    volume: dict[str, Any]
    mount_path: str
    sub_path: str

    @property
    def path(self) -> str:
        return str(PurePosixPath(self.mount_path) / self.sub_path) if self.sub_path else self.mount_path


def source_location(spec: QuantizedModelSpec) -> Location:
    uri = spec.source.uri
    if uri.startswith("file://"):
        return Location(
            {"name": "source", "hostPath": {"path": uri.removeprefix("file://"), "type": "Directory"}},
            SOURCE_MOUNT,
            "",
        )
    if uri.startswith("pvc://"):
        claim, _, path = uri.removeprefix("pvc://").partition("/")
        return Location(
            {"name": "source", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
            SOURCE_MOUNT,
            path.strip("/"),
        )
    scheme = uri.split("://", 1)[0]
    raise UnsupportedSourceError(
        f"spec.source.uri {uri!r}: {scheme}:// sources are not fetched by this version of Kvant; stage the "
        "checkpoint on a PersistentVolumeClaim and use pvc://<claim>/<path> (or file:///<path> on a dev node)"
    )


def artifact_location(spec: QuantizedModelSpec, settings: OperatorSettings, key: str) -> Location:
    output = spec.weights.output
    claim = output.pvc if output else settings.artifact_pvc
    prefix = output.path.strip("/") if output else ""
    return Location(
        {"name": "artifacts", "persistentVolumeClaim": {"claimName": claim}},
        ARTIFACT_MOUNT,
        str(PurePosixPath(prefix) / key) if prefix else key,
    )


def artifact_uri(spec: QuantizedModelSpec, settings: OperatorSettings, key: str) -> str:
    location = artifact_location(spec, settings, key)
    return f"pvc://{location.volume['persistentVolumeClaim']['claimName']}/{location.sub_path}"
