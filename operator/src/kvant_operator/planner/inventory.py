"""The tensor inventory of a checkpoint: names, dtypes and shapes, read from safetensors headers only.

A safetensors file starts with an 8-byte little-endian header length and a JSON header mapping each
tensor name to its dtype, shape and byte range. Reading that is enough to size every conversion, so
the planner never touches tensor data (and the operator never needs torch or the safetensors package).
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

# Bits per element of each safetensors dtype code.
DTYPE_BITS = {
    "F64": 64, "I64": 64, "U64": 64,
    "F32": 32, "I32": 32, "U32": 32,
    "F16": 16, "BF16": 16, "I16": 16, "U16": 16,
    "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "I8": 8, "U8": 8, "BOOL": 8,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}  # fmt: skip
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit; larger means a corrupt or foreign file
INDEX_FILE = "model.safetensors.index.json"
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
        return (self.numel * DTYPE_BITS[self.dtype] + 7) // 8

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
    """The tensors described by one .safetensors file's header."""
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) != 8:
            raise InventoryError(f"{path}: shorter than the 8-byte safetensors header length")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES:
            raise InventoryError(
                f"{path}: header length {length} exceeds {MAX_HEADER_BYTES}; not safetensors"
            )
        raw = f.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InventoryError(f"{path}: header is not JSON ({err}); not a safetensors file") from None
    return [_tensor(path, name, entry) for name, entry in header.items() if name != "__metadata__"]


def _tensor(path: Path, name: str, entry: object) -> Tensor:
    if not isinstance(entry, dict) or entry.get("dtype") not in DTYPE_BITS or "shape" not in entry:
        raise InventoryError(
            f"{path}: tensor {name} has no known dtype/shape ({entry!r}); "
            f"known dtypes: {', '.join(DTYPE_BITS)}"
        )
    return Tensor(name=name, dtype=entry["dtype"], shape=tuple(int(d) for d in entry["shape"]))


def read_checkpoint(folder: Path) -> Inventory | None:
    """The inventory of a checkpoint folder, or None when it holds no safetensors files."""
    index = folder / INDEX_FILE
    if index.is_file():
        files = sorted(set(_index_files(index)))
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        return None
    missing = [name for name in files if not (folder / name).is_file()]
    if missing:
        raise InventoryError(f"{folder}: {INDEX_FILE} lists {', '.join(missing[:3])}, which are missing")
    tensors = [t for name in files for t in read_header(folder / name)]
    return Inventory(tensors=tuple(tensors), origin="safetensors")


def _index_files(index: Path) -> list[str]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise InventoryError(f"{index}: expected a JSON object with a weight_map ({err})") from None
    return [str(f) for f in weight_map.values()]
