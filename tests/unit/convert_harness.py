"""Runs `kvant convert` in-process or as a real process, and reads what it wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from kvant_runtime.convert.converter import Job, run
from kvant_runtime.convert.recipe import Recipe
from kvant_runtime.job_progress import Progress


def convert(source: Path, output: Path, **options: Any) -> dict[str, Any]:
    """Converts with the given Recipe fields and Job options; returns the manifest (None for a worker)."""
    recipe_fields = {key: options.pop(key) for key in ("group_size", "targets", "ignore") if key in options}
    if "ignore" in recipe_fields:
        recipe_fields["ignore"] = tuple(recipe_fields["ignore"])
    manifest = run(Job(source, output, Recipe(**recipe_fields), **options), Progress(human=None))
    return manifest  # type: ignore[return-value]


def kvant(*args: str | Path, **popen: Any) -> subprocess.CompletedProcess[str]:
    """`kvant ARGS...` as a real process."""
    return subprocess.run(
        [sys.executable, "-m", "kvant_cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        **popen,
    )


def kvant_command(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "kvant_cli.main", *map(str, args)]


def tensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint directory, by name."""
    index = json.loads((directory / "model.safetensors.index.json").read_text())["weight_map"]
    out: dict[str, torch.Tensor] = {}
    for shard in sorted(set(index.values())):
        with safe_open(directory / shard, "pt") as file:
            for name in file.keys():  # noqa: SIM118 - safe_open is not a mapping
                out[name] = file.get_tensor(name)
    assert set(out) == set(index), "index and shards disagree"
    return out


def quantized_modules(directory: Path) -> set[str]:
    return {
        name.removesuffix(".weight_packed") for name in tensors(directory) if name.endswith(".weight_packed")
    }
