"""Converts one source shard into one output shard: plan from the header, then read → quantize → write.

A GPTQ conversion hands in the weights it already rounded (`prerounded`): those are written as staged,
and only weights it has no rounding for are quantized here, with RTN.

The plan (every output tensor's name, dtype and shape) comes from the source header alone, so the
output header is written first and tensors stream through. Reading and quantizing run on a thread
pool; the writer takes results in plan order from a bounded window of futures, which bounds memory
to a few tensors in flight.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kvant_contracts.int4_artifact import (
    FP8_SCALE_SUFFIX,
    TensorSpec,
    int4_outputs,
    is_fp8,
    is_fp8_block_scale,
    is_linear_weight,
    module_of,
)
from kvant_kernels.bits import bf16_bits, bf16_values
from kvant_kernels.fp8_block import dequantize_fp8_block
from kvant_kernels.int4 import check_groupable, quantize_pack
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.safetensors_io import ShardReader, ShardWriter, TensorInfo, planned
from kvant_runtime.checkpoint.source import DENSE_DTYPES, SourceCheckpoint
from kvant_runtime.convert.recipe import Recipe
from kvant_runtime.gptq.prerounded import PreRounded

# Raw arrays on their way to the writer, by output tensor name; memoryviews are copied tensors' bytes.
Results = list[tuple[str, npt.NDArray[np.generic] | memoryview]]


class Action(Enum):
    COPY = "copy"
    QUANTIZE = "quantize"
    DEQUANTIZE = "dequantize"


@dataclass(frozen=True)
class TensorJob:
    source: TensorInfo
    action: Action
    outputs: tuple[TensorInfo, ...]
    scale_inv: str | None = None


@dataclass(frozen=True)
class ShardResult:
    shard: str
    sha256: str
    file_bytes: int
    tensor_bytes: int
    tensors: tuple[str, ...]


def plan_shard(source: SourceCheckpoint, shard: str, reader: ShardReader, recipe: Recipe) -> list[TensorJob]:
    _check_index(source, shard, reader)
    indexed = set(source.weight_map)
    fp8_scales = {name for name in reader.tensors if source.fp8_block and is_fp8_block_scale(name, indexed)}
    return [
        _plan_tensor(source, shard, reader.tensors[name], recipe)
        for name in sorted(reader.tensors)
        if name not in fp8_scales
    ]


def _check_index(source: SourceCheckpoint, shard: str, reader: ShardReader) -> None:
    indexed = {name for name, file in source.weight_map.items() if file == shard}
    if missing := sorted(indexed - set(reader.tensors)):
        raise CheckpointError(
            f"{reader.path}: tensor {missing[0]!r} is listed in the index but not in this shard"
        )
    if unlisted := sorted(set(reader.tensors) - indexed):
        raise CheckpointError(
            f"{reader.path}: tensor {unlisted[0]!r} is in this shard but missing from the index"
        )


def _plan_tensor(source: SourceCheckpoint, shard: str, info: TensorInfo, recipe: Recipe) -> TensorJob:
    where = f"{source.shard_path(shard)}: tensor {info.name!r}"
    fp8 = is_fp8(info.dtype)
    if fp8 and not source.fp8_block:
        raise CheckpointError(
            f"{where} is {info.dtype} but config.json declares no FP8-block quantization_config; "
            f"unsupported dtype (supported: {', '.join(DENSE_DTYPES)}, or FP8-block sources)"
        )
    scale_inv = info.name + FP8_SCALE_SUFFIX if fp8 else None
    if scale_inv is not None and scale_inv not in source.weight_map:
        raise CheckpointError(f"{where} is FP8 but the index has no {scale_inv!r} for it")
    # What is written is the shared layout, the one the planner sizes the artifact by.
    layout = int4_outputs(TensorSpec(info.name, info.dtype, info.shape), recipe.rule, recipe.group_size)
    outputs = tuple(planned(t.name, t.dtype, t.shape) for t in layout)
    if recipe.rule.quantizes(info.name, info.shape):
        if not fp8 and info.dtype not in DENSE_DTYPES:
            raise CheckpointError(
                f"{where} has unsupported dtype {info.dtype}; supported: {', '.join(DENSE_DTYPES)}"
            )
        try:
            check_groupable(info.shape, recipe.group_size)
        except ValueError as err:
            raise CheckpointError(f"{where}: {err}") from err
        return TensorJob(info, Action.QUANTIZE, outputs, scale_inv)
    if fp8:
        return TensorJob(info, Action.DEQUANTIZE, outputs, scale_inv)
    return TensorJob(info, Action.COPY, (info,))


def unquantized_linear_modules(jobs: list[TensorJob]) -> list[str]:
    """Modules a loader would treat as Linear but that stay unquantized: the config's `ignore` list."""
    return [
        module_of(job.source.name)
        for job in jobs
        if job.action is not Action.QUANTIZE and is_linear_weight(job.source.name, job.source.shape)
    ]


class _Readers:
    """One open reader per source shard, shared by the pool (FP8 scales may live in another shard)."""

    def __init__(self, source: SourceCheckpoint) -> None:
        self._source = source
        self._open: dict[str, ShardReader] = {}
        self._lock = threading.Lock()

    @property
    def fp8_block(self) -> tuple[int, int]:
        assert self._source.fp8_block is not None, "only FP8-block sources have scale blocks"
        return self._source.fp8_block

    def for_tensor(self, name: str) -> ShardReader:
        return self.for_shard(self._source.weight_map[name])

    def for_shard(self, shard: str) -> ShardReader:
        with self._lock:
            if shard not in self._open:
                self._open[shard] = ShardReader(self._source.shard_path(shard))
            return self._open[shard]

    def close(self) -> None:
        for reader in self._open.values():
            reader.close()


def _run_job(job: TensorJob, readers: _Readers, group_size: int, prerounded: PreRounded | None) -> Results:
    reader = readers.for_tensor(job.source.name)
    if job.action is Action.COPY:
        return [(job.source.name, reader.read_bytes(job.source.name))]
    quantize = job.action is Action.QUANTIZE
    staged = prerounded.get(job.source.name) if prerounded is not None and quantize else None
    if staged is not None:
        return _quantized_results(job, *staged)
    weight, dtype = reader.read(job.source.name), job.source.dtype
    try:
        if job.scale_inv is not None:
            weight, dtype = _fp8_block_values(job, weight, readers), "F32"
        if job.action is Action.DEQUANTIZE:
            return [(job.source.name, bf16_bits(weight.view(np.float32)))]
        packed, scale = quantize_pack(weight, dtype, group_size, job.outputs[1].dtype)
    except ValueError as err:
        raise CheckpointError(f"{reader.path}: tensor {job.source.name!r}: {err}") from err
    return _quantized_results(job, packed, scale)


def _quantized_results(
    job: TensorJob, packed: npt.NDArray[np.generic], scale: npt.NDArray[np.generic]
) -> Results:
    return [
        (job.outputs[0].name, packed),
        (job.outputs[1].name, scale),
        (job.outputs[2].name, np.array(job.source.shape, dtype=np.int64)),
    ]


def _fp8_block_values(
    job: TensorJob, codes: npt.NDArray[np.generic], readers: _Readers
) -> npt.NDArray[np.float32]:
    assert job.scale_inv is not None
    scale_reader = readers.for_tensor(job.scale_inv)
    scale_inv = _float32(scale_reader.read(job.scale_inv), scale_reader.tensors[job.scale_inv].dtype)
    return dequantize_fp8_block(codes.view(np.uint8), scale_inv, readers.fp8_block)


def _float32(values: npt.NDArray[np.generic], dtype: str) -> npt.NDArray[np.float32]:
    """An FP8 scale grid as float32 (DeepSeek-style checkpoints store it as F32, some as BF16)."""
    if dtype == "BF16":
        return bf16_values(values.view(np.uint16))
    if dtype not in ("F32", "F16"):
        raise ValueError(f"weight_scale_inv has unsupported dtype {dtype} (expected F32, BF16 or F16)")
    return values.astype(np.float32)


def convert_shard(
    *,
    source: SourceCheckpoint,
    shard: str,
    recipe: Recipe,
    destination: Path,
    threads: int,
    on_bytes: Callable[[int], None],
    prerounded: PreRounded | None = None,
) -> ShardResult:
    """Writes the converted shard to `destination` (a temporary name the caller renames when done)."""
    readers = _Readers(source)
    try:
        jobs = plan_shard(source, shard, readers.for_shard(shard), recipe)
        outputs = [info for job in jobs for info in job.outputs]
        writer = ShardWriter(destination, outputs)
        try:
            for job, results in _ordered(
                jobs, lambda job: _run_job(job, readers, recipe.group_size, prerounded), threads
            ):
                for name, data in results:
                    if isinstance(data, memoryview):
                        writer.write_raw(name, data)
                    else:
                        writer.write(name, data)
                on_bytes(job.source.nbytes)
            writer.close()
        except BaseException:
            writer.abort()
            destination.unlink(missing_ok=True)
            raise
    finally:
        readers.close()
    return ShardResult(
        shard=shard,
        sha256=writer.sha256.hexdigest(),
        file_bytes=writer.bytes_written,
        tensor_bytes=sum(info.nbytes for info in outputs),
        tensors=tuple(info.name for info in outputs),
    )


def _ordered(
    jobs: list[TensorJob],
    work: Callable[[TensorJob], Results],
    threads: int,
) -> Iterator[tuple[TensorJob, Results]]:
    """Runs `work` on a pool and yields results in job order, with at most 2 x threads in flight."""
    window: deque[tuple[TensorJob, Future[Results]]] = deque()
    pending = iter(jobs)
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kvant-convert") as pool:
        try:
            for job in pending:
                window.append((job, pool.submit(work, job)))
                if len(window) >= 2 * threads:
                    done_job, future = window.popleft()
                    yield done_job, future.result()
            while window:
                done_job, future = window.popleft()
                yield done_job, future.result()
        finally:
            for _, future in window:
                future.cancel()
