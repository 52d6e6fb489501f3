"""Writing KV scales into a published artifact: unpublish, stage, publish under a new digest.

It follows the converter's convention (`checkpoint/staging.py`): consumers treat a folder without
`kvant-manifest.json` as absent. Calibration first moves the manifest into the staging prefix, so the
artifact is unpublished while its scales change and stays so if calibration fails:

    ARTIFACT/.kvant-partial/calibration-previous-manifest.json   the manifest being replaced
    ARTIFACT/.kvant-partial/kvant-kv-scales.safetensors          every k_scale / v_scale, float32 [1]
    ARTIFACT/.kvant-partial/config.json                          with quantization_config.kv_cache_scheme
    ARTIFACT/.kvant-partial/model.safetensors.index.json         with the scale tensors listed
    ARTIFACT/.kvant-partial/kvant-kv-scales.json                 for models that read
                                                                 --quantization-param-path

Publishing moves the files into place, writes the new manifest last and removes the prefix.
A rerun after a failure or a kill finds the previous manifest there and starts again from it.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from kvant_contracts.artifact_manifest import (
    MANIFEST_NAME,
    ManifestError,
    artifact_digest,
    file_sha256,
    verify_artifact,
)
from kvant_contracts.safetensors_header import INDEX_FILE
from kvant_kernels.kv_cache_scheme import KV_CACHE_SCHEME
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.layer_reader import read_json
from kvant_runtime.checkpoint.safetensors_io import ShardReader
from kvant_runtime.checkpoint.staging import STAGING_DIR, Staging, write_json_atomic
from kvant_runtime.launch.argv import KV_SCALES_JSON

SCALES_FILE = "kvant-kv-scales.safetensors"
PREVIOUS_MANIFEST = "calibration-previous-manifest.json"
CONFIG_FILE = "config.json"
_COMPRESSED_TENSORS = "compressed-tensors"


@dataclass(frozen=True)
class Unpublished:
    """An artifact taken out of service for calibration, and the manifest it had."""

    directory: Path
    staging: Staging
    previous: dict[str, Any]


def unpublish(directory: Path) -> Unpublished:
    """Checks the published artifact, then hides it; resumes when a previous run already did."""
    staging = Staging(directory)
    previous_path = staging.dir / PREVIOUS_MANIFEST
    if staging.manifest_path.is_file():
        try:
            verify_artifact(directory, None)
        except ManifestError as err:
            raise CheckpointError(str(err)) from err
        staging.dir.mkdir(exist_ok=True)
        os.replace(staging.manifest_path, previous_path)
    elif not previous_path.is_file():
        raise CheckpointError(
            f"{directory} is not a published Kvant artifact (no {MANIFEST_NAME}, and no interrupted "
            f"calibration in {STAGING_DIR}/); convert the model with `kvant convert` first"
        )
    return Unpublished(directory, staging, read_json(previous_path))


def left_unpublished(directory: Path) -> bool:
    """Whether a calibration took `directory` out of service and has not published it again."""
    staging = Staging(directory)
    return (staging.dir / PREVIOUS_MANIFEST).is_file() and not staging.manifest_path.is_file()


def check_calibratable(config: dict[str, Any], directory: Path) -> None:
    method = (config.get("quantization_config") or {}).get("quant_method")
    if method != _COMPRESSED_TENSORS:
        raise CheckpointError(
            f"{directory / CONFIG_FILE}: quantization_config.quant_method is {method!r}; KV scales are "
            f"declared in a {_COMPRESSED_TENSORS} quantization_config, as `kvant convert` writes it"
        )


def quant_param_document(
    model_type: str | None, layer_scales: list[float], tensor_parallel: int
) -> dict[str, Any]:
    """The `--quantization-param-path` JSON in SGLang's `QuantParamSchema`: a scale per layer (for K and
    V alike), repeated for each TP rank, since SGLang checks that the file has exactly its TP size's
    ranks and, for every rank, every layer; a per-tensor scale is the same on every rank."""
    per_layer = {str(layer): scale for layer, scale in enumerate(layer_scales)}
    return {
        "model_type": model_type,
        "kv_cache": {
            "dtype": "float8_e4m3fn",
            "scaling_factor": {str(rank): dict(per_layer) for rank in range(tensor_parallel)},
        },
    }


def publish(
    artifact: Unpublished,
    scales: dict[str, float],
    calibration: dict[str, Any],
    quant_params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Stages scales, config, index and (given `quant_params`) the JSON scales, then publishes them with
    a new manifest; returns the manifest."""
    staged = artifact.staging.dir
    save_file(
        {name: torch.tensor([value], dtype=torch.float32) for name, value in sorted(scales.items())},
        staged / SCALES_FILE,
        metadata={"format": "pt"},
    )
    os.chmod(staged / SCALES_FILE, 0o644)  # readable by serving pods like the converter's files
    config = read_json(artifact.directory / CONFIG_FILE)
    config["quantization_config"]["kv_cache_scheme"] = dict(KV_CACHE_SCHEME)
    write_json_atomic(staged / CONFIG_FILE, config)
    write_json_atomic(staged / INDEX_FILE, _index_with_scales(artifact.directory, set(scales)))
    written = [CONFIG_FILE, INDEX_FILE, SCALES_FILE]
    if quant_params is not None:
        write_json_atomic(staged / KV_SCALES_JSON, quant_params)
        os.chmod(staged / KV_SCALES_JSON, 0o644)
        written.append(KV_SCALES_JSON)
    else:  # a JSON from an earlier calibration must not outlive it
        (artifact.directory / KV_SCALES_JSON).unlink(missing_ok=True)
    manifest = _manifest(artifact.previous, {name: staged / name for name in written}, calibration)
    artifact.staging.publish(sorted(written), manifest)
    return manifest


def _index_with_scales(directory: Path, scale_names: set[str]) -> dict[str, Any]:
    index = read_json(directory / INDEX_FILE)
    weight_map = {name: file for name, file in index["weight_map"].items() if file != SCALES_FILE}
    if clash := sorted(scale_names & set(weight_map)):
        raise CheckpointError(
            f"{directory / INDEX_FILE}: {clash[0]!r} is already stored in {weight_map[clash[0]]}, "
            f"outside {SCALES_FILE}; remove it from the artifact or reconvert"
        )
    weight_map.update(dict.fromkeys(scale_names, SCALES_FILE))
    total = _tensor_bytes(directory, weight_map) + 4 * len(scale_names)
    return {
        **index,
        "metadata": {**index.get("metadata", {}), "total_size": total},
        "weight_map": dict(sorted(weight_map.items())),
    }


def _tensor_bytes(directory: Path, weight_map: dict[str, str]) -> int:
    total = 0
    for shard in sorted(set(weight_map.values()) - {SCALES_FILE}):
        reader = ShardReader(directory / shard)
        reader.close()
        total += sum(info.nbytes for name, info in reader.tensors.items() if weight_map.get(name) == shard)
    return total


def _manifest(
    previous: dict[str, Any], changed: dict[str, Path], calibration: dict[str, Any]
) -> dict[str, Any]:
    manifest = copy.deepcopy(previous)
    files: dict[str, dict[str, Any]] = manifest["files"]
    if KV_SCALES_JSON not in changed:
        files.pop(KV_SCALES_JSON, None)
    for name, path in changed.items():
        files[name] = {"sha256": file_sha256(path), "bytes": path.stat().st_size}
    manifest["bytes"] = sum(int(entry["bytes"]) for entry in files.values())
    manifest["digest"] = artifact_digest({name: str(entry["sha256"]) for name, entry in files.items()})
    manifest["kvCache"] = calibration
    return manifest
