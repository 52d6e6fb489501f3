"""Builds calibrated tiny INT4 artifacts and edits tensors in place, for the calibrate and eval tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from kvant_kernels.tensors import DTYPE_NAMES, from_raw
from kvant_runtime.calibrate.calibrator import Options, calibrate
from kvant_runtime.checkpoint.safetensors_io import ShardReader
from kvant_runtime.evaluate.evaluator import Options as EvalOptions
from kvant_runtime.evaluate.evaluator import evaluate
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.convert_harness import convert

# Small enough for seconds per test on two cores, large enough for a stable KL estimate.
CALIBRATION = Options(samples=4, sequence_length=256)
EVAL_SAMPLES, EVAL_SEQUENCE_LENGTH = 4, 256


def int4_artifact(arch: str, directory: Path) -> Path:
    convert(tiny_checkpoint(arch), directory, group_size=32)
    return directory


def calibrated(arch: str, directory: Path) -> dict[str, Any]:
    """Converts the tiny `arch` checkpoint to INT4 in `directory` and calibrates it; returns the result."""
    return calibrate(int4_artifact(arch, directory), CALIBRATION, lambda _: None)


def evaluated(reference: Path, candidate: Path, **options: Any) -> dict[str, Any]:
    settings = EvalOptions(samples=EVAL_SAMPLES, sequence_length=EVAL_SEQUENCE_LENGTH, **options)
    return evaluate(reference, candidate, settings, lambda _: None)


def weight_map(directory: Path) -> dict[str, str]:
    data: dict[str, str] = json.loads((directory / "model.safetensors.index.json").read_text())["weight_map"]
    return data


def overwrite_tensor(directory: Path, name: str, value: torch.Tensor) -> None:
    """Writes `value` over tensor `name` in its shard, byte for byte: same size, so the manifest still
    lists the file at its size while its content is now wrong (a corrupted or mis-made artifact)."""
    path = directory / weight_map(directory)[name]
    reader = ShardReader(path)
    info = reader.tensors[name]
    reader.close()
    assert (DTYPE_NAMES[value.dtype], tuple(value.shape)) == (info.dtype, info.shape), "same dtype and shape"
    with path.open("r+b") as file:
        file.seek(info.offset)
        file.write(value.contiguous().view(torch.uint8).numpy().tobytes())


def read_tensor(directory: Path, name: str) -> torch.Tensor:
    reader = ShardReader(directory / weight_map(directory)[name])
    try:
        return from_raw(reader.read(name), reader.tensors[name].dtype).clone()
    finally:
        reader.close()
