"""Streaming safetensors I/O: read one tensor at a time, write a shard whose header is known up front.

Reading uses positioned reads into fresh buffers rather than a memory map, so the process holds only
the tensors in flight, never a whole shard's mapped pages. Writing lays out the header first from the
planned names, dtypes and shapes, then appends tensors in order while hashing the bytes, so a shard is
never held in memory either.

Tensors are numpy arrays of their raw values, with no torch in the converter process (its import
alone costs ~0.7 GB of RSS): formats numpy lacks are kept as bits of the same width (BF16 as uint16,
FP8 as uint8); `kvant_kernels.bits` converts them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from kvant_runtime.convert.errors import ConvertError

# safetensors dtype → the numpy dtype its raw values are held in.
DTYPES: dict[str, np.dtype[np.generic]] = {
    name: np.dtype(raw)
    for name, raw in {
        "F64": np.float64,
        "F32": np.float32,
        "F16": np.float16,
        "BF16": np.uint16,
        "F8_E4M3": np.uint8,
        "F8_E5M2": np.uint8,
        "I64": np.int64,
        "I32": np.int32,
        "I16": np.int16,
        "I8": np.int8,
        "U8": np.uint8,
        "BOOL": np.bool_,
    }.items()
}
_HEADER_LIMIT = 100 * 1024 * 1024
_ALIGNMENT = 8


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int = 0
    nbytes: int = 0


class ShardReader:
    """A source shard's header, validated against the file size, and positioned reads of its tensors."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tensors = _read_header(path)
        self._fd = os.open(path, os.O_RDONLY)

    def close(self) -> None:
        os.close(self._fd)

    def read_bytes(self, name: str) -> bytearray:
        info = self.tensors[name]
        buffer = bytearray(info.nbytes)
        view = memoryview(buffer)
        done = 0
        while done < info.nbytes:
            got = os.preadv(self._fd, [view[done:]], info.offset + done)
            if got == 0:
                raise ConvertError(
                    f"{self.path}: tensor {name!r} ends past the end of the file (truncated shard)"
                )
            done += got
        return buffer

    def read(self, name: str) -> npt.NDArray[np.generic]:
        """The tensor's raw values (see the module docstring), writable."""
        info = self.tensors[name]
        if info.dtype not in DTYPES:
            raise ConvertError(f"{self.path}: tensor {name!r} has unsupported dtype {info.dtype}")
        return np.frombuffer(self.read_bytes(name), dtype=DTYPES[info.dtype]).reshape(info.shape)


def _read_header(path: Path) -> dict[str, TensorInfo]:
    try:
        size = path.stat().st_size
        with path.open("rb") as file:
            prefix = file.read(8)
            if len(prefix) < 8:
                raise ConvertError(f"{path}: not a safetensors file ({size} bytes, no header)")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > min(_HEADER_LIMIT, size - 8):
                raise ConvertError(
                    f"{path}: corrupt safetensors header (claims {header_len} bytes, file has {size})"
                )
            header = json.loads(file.read(header_len))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConvertError(f"{path}: cannot read safetensors header: {err}") from err
    if not isinstance(header, dict):
        raise ConvertError(f"{path}: corrupt safetensors header (not a JSON object)")
    data_start = 8 + header_len
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name != "__metadata__":
            tensors[name] = _tensor_info(path, name, entry, data_start, size)
    return tensors


def _tensor_info(path: Path, name: str, entry: object, data_start: int, size: int) -> TensorInfo:
    try:
        assert isinstance(entry, dict)
        dtype, shape, (begin, end) = (
            str(entry["dtype"]),
            tuple(int(d) for d in entry["shape"]),
            entry["data_offsets"],
        )
    except (AssertionError, KeyError, TypeError, ValueError) as err:
        raise ConvertError(f"{path}: corrupt header entry for tensor {name!r}") from err
    if data_start + end > size:
        raise ConvertError(
            f"{path}: tensor {name!r} ends at byte {data_start + end} but the file has {size} bytes "
            "(truncated or corrupt shard)"
        )
    if dtype in DTYPES:
        expected = math.prod(shape) * DTYPES[dtype].itemsize
        if end - begin != expected:
            raise ConvertError(
                f"{path}: tensor {name!r} ({dtype} {list(shape)}) should take {expected} bytes, "
                f"the header says {end - begin}"
            )
    return TensorInfo(name, dtype, shape, data_start + begin, end - begin)


class ShardWriter:
    """Writes a safetensors file whose tensors (names, dtypes, shapes, order) are fixed in advance."""

    def __init__(self, path: Path, plan: Sequence[TensorInfo]) -> None:
        self.path = path
        self.sha256 = hashlib.sha256()
        self.bytes_written = 0
        self._pending = [info.name for info in plan]
        self._plan = {info.name: info for info in plan}
        self._file: BinaryIO = path.open("wb")
        self._emit(_header_bytes(plan))

    def write(self, name: str, array: npt.NDArray[np.generic]) -> None:
        """Writes a planned tensor from its raw values (in the numpy dtype DTYPES holds them in)."""
        expected = self._plan[name]
        if not self._pending or self._pending[0] != name:
            raise RuntimeError(f"tensor {name!r} written out of planned order")
        actual = (array.dtype, tuple(array.shape))
        if actual != (DTYPES[expected.dtype], expected.shape):
            raise RuntimeError(f"tensor {name!r} is (raw dtype, shape) {actual}, planned {expected}")
        self._pending.pop(0)
        if array.size:
            self._emit(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)

    def write_raw(self, name: str, data: bytearray) -> None:
        if not self._pending or self._pending[0] != name or self._plan[name].nbytes != len(data):
            raise RuntimeError(f"raw tensor {name!r} does not match the plan")
        self._pending.pop(0)
        self._emit(memoryview(data))

    def close(self) -> None:
        """Flushes to disk; the file is complete only if every planned tensor was written."""
        if self._pending:
            raise RuntimeError(f"{self.path}: {len(self._pending)} planned tensors never written")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def abort(self) -> None:
        self._file.close()

    def _emit(self, data: bytes | memoryview) -> None:
        self._file.write(data)
        self.sha256.update(data)
        self.bytes_written += len(data)


def planned(name: str, dtype: str, shape: Sequence[int]) -> TensorInfo:
    """A tensor to be written; its size follows from dtype and shape."""
    return TensorInfo(name, dtype, tuple(shape), 0, math.prod(shape) * DTYPES[dtype].itemsize)


def _header_bytes(plan: Sequence[TensorInfo]) -> bytes:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for info in plan:
        header[info.name] = {
            "dtype": info.dtype,
            "shape": list(info.shape),
            "data_offsets": [offset, offset + info.nbytes],
        }
        offset += info.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % _ALIGNMENT)
    return struct.pack("<Q", len(encoded)) + encoded
