"""Artifacts: the content-addressed key of a conversion recipe, and where sources and artifacts live.

Two QuantizedModels with the same recipe share one key, hence one Job and one artifact.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from kvant_contracts.artifact_manifest import ARTIFACT_BYTES_VERSION
from kvant_contracts.weight_formats import weight_format
from kvant_contracts.weights_recipe import GPTQ, int4_scheme
from kvant_operator.api.spec import KvScales, QuantizedModelSpec
from kvant_operator.api.status import SourceStatus
from kvant_operator.hashing import digest
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import Location, is_fetched, locate_source

ARTIFACT_MOUNT = "/artifacts"


def needs_conversion(spec: QuantizedModelSpec) -> bool:
    return weight_format(spec.weights.format.value).converts


def needs_calibration(spec: QuantizedModelSpec) -> bool:
    return spec.kv_cache.dtype.is_fp8 and spec.kv_cache.scales is KvScales.CALIBRATE


def needs_gptq(spec: QuantizedModelSpec) -> bool:
    """Whether the conversion in effect rounds with GPTQ (the method does not depend on the source)."""
    return needs_conversion(spec) and spec.weights.recipe(converts=True, moe=False).method == GPTQ


def needs_artifact(spec: QuantizedModelSpec) -> bool:
    return needs_conversion(spec) or needs_calibration(spec)


def artifact_key(spec: QuantizedModelSpec, fetched: SourceStatus | None = None) -> str:
    """Hash of everything that changes the artifact's bytes (source, weights, KV calibration, the
    converter's bytes version) and of where it is written, so models sharing a key always share the
    same files. No operator setting enters it, so an upgrade that changes none of these keeps every
    key. A fetched source enters by its resolved revision and content digest, so a branch that moves
    later makes a new key instead of silently changing an existing artifact."""
    weights = spec.weights.model_dump(mode="json", by_alias=True)
    if weights.get("gptq") is None:  # a field newer than most keys: unset, it hashes as before
        weights.pop("gptq", None)
    # The INT4 method and group size in effect. Targets enter as written: the source is in the key
    # too, and the effective targets follow from the two (kvant_contracts.weights_recipe). This is the
    # dict keys have always hashed, so an operator upgrade reconverts nothing.
    weights["method"], weights["groupSize"] = int4_scheme(
        spec.weights.format.value, weights["method"], weights["groupSize"]
    )
    calibration = spec.kv_cache.calibration
    calibration_recipe = (
        calibration.model_dump(mode="json") if calibration and needs_calibration(spec) else None
    )
    recipe = {
        "source": source_identity(spec, fetched),
        "weights": weights
        if needs_conversion(spec)
        else {"format": spec.weights.format.value, "output": weights.get("output")},
        "kvCalibration": {"dtype": spec.kv_cache.dtype.value, "calibration": calibration_recipe},
        # What the converter writes, not which image carries it: a release whose converter writes the
        # same bytes keeps every key, so an operator upgrade neither reconverts nor moves a model.
        "converter": ARTIFACT_BYTES_VERSION,
    }
    return digest(recipe)


def source_identity(spec: QuantizedModelSpec, fetched: SourceStatus | None) -> dict[str, Any]:
    if not is_fetched(spec.source.uri):
        return {"uri": spec.source.uri, "revision": spec.source.revision}
    if fetched is None:
        raise ValueError(f"{spec.source.uri}: the artifact key of a fetched source needs the fetch's result")
    return {"uri": spec.source.uri, "revision": fetched.revision, "digest": fetched.digest}


def source_location(spec: QuantizedModelSpec, fetched: SourceStatus | None = None) -> Location:
    """Where pods read the model's source (see `kvant_operator.sources`)."""
    return locate_source(spec.source.uri, fetched.location if fetched is not None else None)


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
