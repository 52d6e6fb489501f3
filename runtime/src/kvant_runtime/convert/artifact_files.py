"""What finalize writes besides the shards: index, config.json with the compressed-tensors
quantization_config, copied tokenizer/generation files, and the manifest with the artifact digest.

The digest is the sha256 of the sorted `"<sha256>  <path>"` lines of every file except the manifest, so
it depends only on the bytes of the artifact, never on how many workers made it or how often they ran.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from kvant_contracts.artifact_manifest import MANIFEST_NAME, MANIFEST_VERSION, artifact_digest
from kvant_contracts.safetensors_header import INDEX_FILE, SINGLE_FILE
from kvant_contracts.weight_formats import weight_format
from kvant_kernels.kv_cache_scheme import KV_CACHE_SCHEME
from kvant_runtime.checkpoint.contained_paths import contained
from kvant_runtime.checkpoint.source import SourceCheckpoint
from kvant_runtime.convert.recipe import Recipe

KV_SCALE_SUFFIXES = ("k_scale", "v_scale")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf")
# A fetched source carries its own manifest (what was fetched); the artifact writes a new one.
_REWRITTEN = {"config.json", INDEX_FILE, MANIFEST_NAME}


def quantization_config(recipe: Recipe, ignore: list[str], has_kv_scales: bool) -> dict[str, Any]:
    """Symmetric grouped W4A16 in `pack-quantized`, as SGLang, vLLM and transformers read it."""
    weights = {
        "num_bits": 4,
        "type": "int",
        "symmetric": True,
        "strategy": "group",
        "group_size": recipe.group_size,
        "dynamic": False,
        "actorder": None,
        "observer": "minmax",
    }
    kv_cache_scheme = dict(KV_CACHE_SCHEME) if has_kv_scales else None
    fmt = weight_format(recipe.format)
    return {
        "quant_method": fmt.quant_methods[0],
        "format": fmt.compressed_tensors_format,
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": weights,
                "input_activations": None,
                "output_activations": None,
                "format": fmt.compressed_tensors_format,
            }
        },
        "ignore": sorted(set(ignore)),
        "kv_cache_scheme": kv_cache_scheme,
    }


def output_config(
    source: SourceCheckpoint, recipe: Recipe, ignore: list[str], has_kv_scales: bool
) -> dict[str, Any]:
    config = {key: value for key, value in source.config.items() if key != "quantization_config"}
    config["quantization_config"] = quantization_config(recipe, ignore, has_kv_scales)
    return config


def index(weight_map: dict[str, str], total_size: int) -> dict[str, Any]:
    return {"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}


def copied_files(source: SourceCheckpoint) -> list[str]:
    """Top-level files copied unchanged: tokenizer, generation config, chat template, remote code, license."""
    return sorted(
        path.name
        for path in source.directory.iterdir()
        if path.is_file()
        and not path.name.startswith(".")
        and not path.name.endswith(_WEIGHT_SUFFIXES)
        and path.name not in _REWRITTEN
        and path.name != SINGLE_FILE
    )


def copy_into(source: SourceCheckpoint, names: list[str], staging_dir: Path) -> None:
    """Copies each file's content (never a link) after checking it lives inside the checkpoint."""
    for name in names:
        path = contained(source.directory, name, "file", source.allowed_roots)
        shutil.copyfile(path, staging_dir / name, follow_symlinks=True)


def files_digest(files: dict[str, dict[str, Any]]) -> str:
    """The artifact digest of a manifest's `files` (the rule lives in kvant_contracts.artifact_manifest)."""
    return artifact_digest({name: str(entry["sha256"]) for name, entry in files.items()})


def manifest(
    recipe: Recipe, source: SourceCheckpoint, revision: str | None, files: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    return {
        "kvantManifestVersion": MANIFEST_VERSION,
        "recipe": recipe.to_json(),
        "source": {
            "revision": revision,
            "format": "fp8-block" if source.fp8_block else "dense",
            "files": {shard: source.shard_bytes(shard) for shard in source.shards},
        },
        "files": files,
        "bytes": sum(entry["bytes"] for entry in files.values()),
        "sourceBytes": sum(source.shard_bytes(shard) for shard in source.shards),
        "digest": files_digest(files),
    }


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"
