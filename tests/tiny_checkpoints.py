"""Tiny generated checkpoints for tests, made once per test session and shared read-only.

`tiny_checkpoint(arch, dtype)` returns a directory made by `kvant_dev.tinymodel.make_tiny_checkpoint`
(Llama GQA or DeepSeek-V3 MLA + MoE; bf16 or FP8-block; two shards). Copy it with `copy_checkpoint`
before changing anything in it.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

from kvant_dev.tinymodel import make_tiny_checkpoint

_ROOT = Path(tempfile.mkdtemp(prefix="kvant-tiny-"))
atexit.register(shutil.rmtree, _ROOT, True)


def tiny_checkpoint(arch: str = "llama", dtype: str = "bf16", shards: int = 2, **overrides: Any) -> Path:
    suffix = "-".join(f"{key}={value}" for key, value in sorted(overrides.items()))
    path = _ROOT / f"{arch}-{dtype}-{shards}{'-' + suffix if suffix else ''}"
    if not (path / "config.json").is_file():
        make_tiny_checkpoint(path, arch=arch, dtype=dtype, shards=shards, **overrides)  # type: ignore[arg-type]
    return path


def copy_checkpoint(source: Path, destination: Path) -> Path:
    shutil.copytree(source, destination)
    return destination
