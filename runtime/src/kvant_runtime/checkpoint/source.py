"""The source checkpoint: its shards, index, config and numeric format, checked before any work starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvant_runtime.convert.contained_paths import contained
from kvant_runtime.convert.convert_errors import ConvertError
from kvant_runtime.convert.safetensors_io import ShardReader
from kvant_runtime.jsonfile import read_json_object

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
DENSE_DTYPES = ("BF16", "F16", "F32")
SUPPORTED_SOURCES = (
    "bf16/fp16/fp32 safetensors, or FP8-block "
    "(quantization_config.quant_method 'fp8' with weight_block_size, DeepSeek-V3 style)"
)


@dataclass(frozen=True)
class SourceCheckpoint:
    directory: Path
    config: dict[str, Any]
    shards: tuple[str, ...]
    weight_map: dict[str, str]
    # (rows, cols) of the FP8 scale blocks for an FP8-block source, None for a dense one.
    fp8_block: tuple[int, int] | None
    allowed_roots: tuple[Path, ...] = ()  # where links out of the checkpoint may lead

    def shard_path(self, shard: str) -> Path:
        return self.directory / shard

    def shard_bytes(self, shard: str) -> int:
        return self.shard_path(shard).stat().st_size


def open_source(directory: Path, allowed_roots: tuple[Path, ...] = ()) -> SourceCheckpoint:
    if not directory.is_dir():
        raise ConvertError(f"source {directory} is not a directory")
    config = _read_json(contained(directory, "config.json", "config file", allowed_roots))
    fp8_block = _source_format(directory / "config.json", config)
    weight_map = _weight_map(directory, allowed_roots)
    shards = tuple(sorted(set(weight_map.values())))
    for shard in shards:
        contained(directory, shard, f"{directory / INDEX_FILE}: shard", allowed_roots)
        if not (directory / shard).is_file():
            listed = next(name for name, file in weight_map.items() if file == shard)
            raise ConvertError(f"{directory / INDEX_FILE}: shard {shard} (holding {listed!r}) does not exist")
    return SourceCheckpoint(directory, config, shards, weight_map, fp8_block, allowed_roots)


def _read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, ConvertError, "checkpoint directory")


def _source_format(config_path: Path, config: dict[str, Any]) -> tuple[int, int] | None:
    quant = config.get("quantization_config")
    if quant is None:
        return None
    method = quant.get("quant_method")
    block = quant.get("weight_block_size")
    if (
        method == "fp8"
        and isinstance(block, list)
        and len(block) == 2
        and all(isinstance(b, int) for b in block)
    ):
        return block[0], block[1]
    if method == "fp8":
        raise ConvertError(
            f"{config_path}: unsupported source format: quantization_config.weight_block_size is {block!r} "
            f"(per-tensor or per-channel FP8); supported: {SUPPORTED_SOURCES}"
        )
    fmt = f" (format {quant['format']!r})" if "format" in quant else ""
    raise ConvertError(
        f"{config_path}: unsupported source format: quantization_config.quant_method is {method!r}{fmt}; "
        f"supported: {SUPPORTED_SOURCES}"
    )


def _weight_map(directory: Path, allowed_roots: tuple[Path, ...]) -> dict[str, str]:
    index_path = directory / INDEX_FILE
    if index_path.is_file():
        contained(directory, INDEX_FILE, "index file", allowed_roots)
        index = _read_json(index_path)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ConvertError(f"{index_path}: no weight_map")
        return {str(name): str(file) for name, file in weight_map.items()}
    if (directory / SINGLE_FILE).is_file():
        contained(directory, SINGLE_FILE, "shard", allowed_roots)
        reader = ShardReader(directory / SINGLE_FILE)
        reader.close()
        return dict.fromkeys(reader.tensors, SINGLE_FILE)
    raise ConvertError(f"{directory}: no {INDEX_FILE} or {SINGLE_FILE}; is this a safetensors checkpoint?")
