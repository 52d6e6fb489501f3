"""The tensor inventory of a checkpoint: names, dtypes and shapes, read from safetensors headers only.

Reading the headers (`kvant_contracts.safetensors_header`, the converter's reader too) is enough to
size every conversion, so the planner never touches tensor data (and the operator never needs torch
or the safetensors package).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from kvant_contracts import safetensors_header
from kvant_contracts.safetensors_header import tensor_bytes

_LAYER = re.compile(r"\.layers\.(\d+)\.")


class InventoryError(ValueError):
    """A checkpoint file that cannot be read as safetensors; the message names the file."""


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return tensor_bytes(self.dtype, self.shape)

    @cached_property
    def layer(self) -> int | None:
        found = _LAYER.search(self.name)
        return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Inventory:
    """Every tensor of a checkpoint. `origin` says whether it was read or derived from config.json."""

    tensors: tuple[Tensor, ...]
    origin: str  # "safetensors" or "config.json"

    @cached_property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


def read_header(path: Path) -> list[Tensor]:
    """The tensors described by one .safetensors file's header (checked against the file)."""
    try:
        entries = safetensors_header.read_header(path, complete=False)  # see read_header
    except safetensors_header.HeaderError as err:
        raise InventoryError(str(err)) from None
    return [Tensor(e.name, e.dtype, e.shape) for e in entries.values()]


def read_checkpoint(folder: Path) -> Inventory | None:
    """The inventory of a checkpoint folder, or None when it holds no safetensors files."""
    index = folder / safetensors_header.INDEX_FILE
    if index.is_file():
        files = sorted(set(_index_files(index)))
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        return None
    missing = [name for name in files if not (folder / name).is_file()]
    if missing:
        raise InventoryError(
            f"{folder}: {safetensors_header.INDEX_FILE} lists {', '.join(missing[:3])}, which are missing"
        )
    tensors = [t for name in files for t in read_header(folder / name)]
    return Inventory(tensors=tuple(tensors), origin="safetensors")


def _index_files(index: Path) -> list[str]:
    try:
        return list(safetensors_header.read_weight_map(index).values())
    except safetensors_header.HeaderError as err:
        raise InventoryError(str(err)) from None
