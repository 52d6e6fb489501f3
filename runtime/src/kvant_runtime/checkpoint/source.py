"""The source checkpoint: its shards, index, config and numeric format, checked before any work starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvant_contracts.safetensors_header import INDEX_FILE, SINGLE_FILE, HeaderError, read_weight_map
from kvant_runtime.checkpoint.contained_paths import contained
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.safetensors_io import ShardReader
from kvant_runtime.jsonfile import read_json_object

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
        raise CheckpointError(f"source {directory} is not a directory")
    config = _read_json(contained(directory, "config.json", "config file", allowed_roots))
    fp8_block = _source_format(directory / "config.json", config)
    tensors = weight_map(directory, allowed_roots)
    shards = tuple(sorted(set(tensors.values())))
    for shard in shards:
        contained(directory, shard, f"{directory / INDEX_FILE}: shard", allowed_roots)
        if not (directory / shard).is_file():
            listed = next(name for name, file in tensors.items() if file == shard)
            raise CheckpointError(
                f"{directory / INDEX_FILE}: shard {shard} (holding {listed!r}) does not exist"
            )
    return SourceCheckpoint(directory, config, shards, tensors, fp8_block, allowed_roots)


def _read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, CheckpointError, "checkpoint directory")


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
        raise CheckpointError(
            f"{config_path}: unsupported source format: quantization_config.weight_block_size is {block!r} "
            f"(per-tensor or per-channel FP8); supported: {SUPPORTED_SOURCES}"
        )
    fmt = f" (format {quant['format']!r})" if "format" in quant else ""
    raise CheckpointError(
        f"{config_path}: unsupported source format: quantization_config.quant_method is {method!r}{fmt}; "
        f"supported: {SUPPORTED_SOURCES}"
    )


def weight_map(directory: Path, allowed_roots: tuple[Path, ...] | None = None) -> dict[str, str]:
    """A checkpoint folder's tensors by shard file: its index, or its one file. With `allowed_roots`
    (a source the converter reads) every file it names must stay inside the folder or those roots
    (contained_paths); without (an artifact or model folder the user points calibrate or eval at), a
    folder of links into a cache reads as it is."""
    index_path = directory / INDEX_FILE
    if index_path.is_file():
        if allowed_roots is not None:
            contained(directory, INDEX_FILE, "index file", allowed_roots)
        try:
            return read_weight_map(index_path)
        except HeaderError as err:
            raise CheckpointError(str(err)) from err
    if (directory / SINGLE_FILE).is_file():
        if allowed_roots is not None:
            contained(directory, SINGLE_FILE, "shard", allowed_roots)
        reader = ShardReader(directory / SINGLE_FILE)
        reader.close()
        return dict.fromkeys(reader.tensors, SINGLE_FILE)
    raise CheckpointError(f"{directory}: no {INDEX_FILE} or {SINGLE_FILE}; is this a safetensors checkpoint?")
