"""Reading tensors into fresh buffers against a reused one: the cost the converter's buffer pool
(kvant_runtime.convert.buffer_pool) avoids. Prints MB/s for each way and the ratio, in one run.

    python bench/convert/read_buffers.py [--mib 512] [--tensor-mib 64] [--threads 2]

A file of random bytes is read whole (page cache warm after the first pass) in tensor-sized
positioned reads, by `--threads` threads at once, three ways: into a new `bytearray` per tensor
(zero-filled, then read), into a new `numpy.empty` per tensor (pages zero-filled by the kernel on
first touch), and into one buffer per thread reused for every tensor. Best of 5 passes each.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

Make = Callable[[], memoryview]


def read_all(fd: int, size: int, tensor: int, threads: int, make: Make) -> None:
    def read_one(offset: int) -> None:
        view = make()[: min(tensor, size - offset)]
        done = 0
        while done < len(view):
            done += os.preadv(fd, [view[done:]], offset + done)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(read_one, range(0, size, tensor)))


def best_mb_s(fd: int, size: int, tensor: int, threads: int, make: Make) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        read_all(fd, size, tensor, threads, make)
        best = min(best, time.perf_counter() - start)
    return size / best / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--tensor-mib", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    size, tensor = args.mib << 20, args.tensor_mib << 20
    with tempfile.TemporaryDirectory(prefix="kvant-bench-read-") as folder:
        path = Path(folder) / "blob"
        path.write_bytes(os.urandom(size))
        fd = os.open(path, os.O_RDONLY)
        try:
            mine = threading.local()  # each reading thread's one buffer, made on its first read

            def reused() -> memoryview:
                if not hasattr(mine, "buffer"):
                    mine.buffer = memoryview(bytearray(tensor))
                return mine.buffer  # type: ignore[no-any-return]

            ways: dict[str, Make] = {
                "new bytearray": lambda: memoryview(bytearray(tensor)),
                "new numpy.empty": lambda: np.empty(tensor, np.uint8).data,
                "reused buffer": reused,
            }
            rates = {name: best_mb_s(fd, size, tensor, args.threads, make) for name, make in ways.items()}
        finally:
            os.close(fd)
    print(f"{args.mib} MiB in {args.tensor_mib} MiB reads, {args.threads} threads")
    for name, rate in rates.items():
        print(f"{name:16s} {rate:8.0f} MB/s  {rate / rates['new bytearray']:.2f}x new bytearray")


if __name__ == "__main__":
    main()
