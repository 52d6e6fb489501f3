"""Reading a safetensors header, defined once: the planner sizes a checkpoint from it, the converter
reads tensors by it, and both refuse the same broken files with the same words.

A safetensors file starts with an 8-byte little-endian header length and a JSON header mapping each
tensor name to its dtype, shape and byte range. Everything a header claims is checked against the
file before anyone trusts it: the length against the format's limit and the file size, each entry's
dtype and shape, and its byte range against the file and against what its dtype and shape take.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from dataclasses import dataclass
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
# A sharded checkpoint's index (tensor name -> shard file), and the one file of an unsharded one.
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


class HeaderError(ValueError):
    """A file that cannot be read as safetensors; the message names the file and what is wrong."""


@dataclass(frozen=True)
class HeaderEntry:
    """One tensor as the header describes it; `offset` is absolute in the file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int = 0
    nbytes: int = 0


def read_weight_map(index: Path) -> dict[str, str]:
    """The weight map of a checkpoint's index (tensor name -> shard file), read once for the planner,
    the converter and the layer reader alike; HeaderError naming the file when it is not a JSON object
    with a non-empty weight_map."""
    try:
        data = json.loads(index.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise HeaderError(f"{index}: not readable JSON: {err}") from err
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise HeaderError(f"{index}: no weight_map")
    return {str(name): str(file) for name, file in weight_map.items()}


def tensor_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    return (math.prod(shape) * DTYPE_BITS[dtype] + 7) // 8


def read_header(path: Path, *, complete: bool = True) -> dict[str, HeaderEntry]:
    """The tensors of one .safetensors file, by name, in header order.

    `complete` False skips the one check that looks past the header, that every tensor's bytes are in
    the file: the planner, which needs shapes only, leaves a truncated shard to the converter, whose
    failure is retried (so a re-copied source converts), where a failed plan would wait for a spec
    edit."""
    try:
        size = path.stat().st_size
        with path.open("rb") as file:
            prefix = file.read(8)
            if len(prefix) < 8:
                raise HeaderError(f"{path}: not a safetensors file ({size} bytes, no header)")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > min(MAX_HEADER_BYTES, size - 8):
                raise HeaderError(
                    f"{path}: corrupt safetensors header (claims {header_len} bytes, file has {size})"
                )
            header = json.loads(file.read(header_len))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise HeaderError(f"{path}: cannot read safetensors header: {err}") from err
    if not isinstance(header, dict):
        raise HeaderError(f"{path}: corrupt safetensors header (not a JSON object)")
    data_start = 8 + header_len
    entries = {
        name: _entry(path, name, entry, data_start, size if complete else None)
        for name, entry in header.items()
        if name != "__metadata__"
    }
    _refuse_overlaps(path, entries)
    return entries


def _refuse_overlaps(path: Path, entries: dict[str, HeaderEntry]) -> None:
    """Two tensors sharing bytes would let one tensor's data masquerade as another's."""
    spans = sorted((e.offset, e.offset + e.nbytes, e.name) for e in entries.values() if e.nbytes)
    for (_, end, name), (begin, _, other) in itertools.pairwise(spans):
        if begin < end:
            raise HeaderError(f"{path}: tensors {name!r} and {other!r} overlap in the file (corrupt header)")


def _entry(path: Path, name: str, entry: object, data_start: int, size: int | None) -> HeaderEntry:
    try:
        assert isinstance(entry, dict)
        dtype, shape, (begin, end) = (
            str(entry["dtype"]),
            tuple(int(d) for d in entry["shape"]),
            entry["data_offsets"],
        )
        assert isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end
        assert all(d >= 0 for d in shape)
    except (AssertionError, KeyError, TypeError, ValueError) as err:
        raise HeaderError(f"{path}: corrupt header entry for tensor {name!r}") from err
    if dtype not in DTYPE_BITS:
        raise HeaderError(
            f"{path}: tensor {name!r} has unknown dtype {dtype!r}; known dtypes: {', '.join(DTYPE_BITS)}"
        )
    if size is not None and data_start + end > size:
        raise HeaderError(
            f"{path}: tensor {name!r} ends at byte {data_start + end} but the file has {size} bytes "
            "(truncated or corrupt shard)"
        )
    expected = tensor_bytes(dtype, shape)
    if end - begin != expected:
        raise HeaderError(
            f"{path}: tensor {name!r} ({dtype} {list(shape)}) should take {expected} bytes, "
            f"the header says {end - begin}"
        )
    return HeaderEntry(name, dtype, shape, data_start + begin, end - begin)
