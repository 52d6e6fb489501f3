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
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from kvant_contracts.safetensors_header import HeaderEntry, HeaderError, read_header
from kvant_runtime.checkpoint.errors import CheckpointError

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
_ALIGNMENT = 8


TensorInfo = HeaderEntry  # a tensor's name, dtype, shape and (when read) where its bytes are


class ShardReader:
    """A source shard's header, validated against the file size, and positioned reads of its tensors."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tensors = _read_header(path)
        self._fd = os.open(path, os.O_RDONLY)

    def close(self) -> None:
        os.close(self._fd)

    def read_bytes(self, name: str) -> memoryview:
        info = self.tensors[name]
        # Not bytearray(n): it writes n zeros before the read overwrites them all, and that pass cost
        # 2.5-3x the read itself from the page cache (bench/convert/read_buffers.py). numpy's empty
        # buffer is never zeroed by us; malloc hands back memory the last tensors freed.
        view = np.empty(info.nbytes, np.uint8).data
        done = 0
        while done < info.nbytes:
            got = os.preadv(self._fd, [view[done:]], info.offset + done)
            if got == 0:
                raise CheckpointError(
                    f"{self.path}: tensor {name!r} ends past the end of the file (truncated shard)"
                )
            done += got
        return view

    def read(self, name: str) -> npt.NDArray[np.generic]:
        """The tensor's raw values (see the module docstring), writable."""
        info = self.tensors[name]
        if info.dtype not in DTYPES:
            raise CheckpointError(f"{self.path}: tensor {name!r} has unsupported dtype {info.dtype}")
        return np.frombuffer(self.read_bytes(name), dtype=DTYPES[info.dtype]).reshape(info.shape)


def _read_header(path: Path) -> dict[str, TensorInfo]:
    try:
        return read_header(path)
    except HeaderError as err:
        raise CheckpointError(str(err)) from err


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

    def write_raw(self, name: str, data: memoryview) -> None:
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
        try:
            self._file.write(data)
        except OSError as err:  # a write's error names no file; a full volume's message should
            raise OSError(err.errno, err.strerror, str(self.path)) from err
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
