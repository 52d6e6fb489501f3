"""The rounded tensors GPTQ staged, looked up by the shard converter instead of rounding with RTN.

Torch-free (the shard converter never loads torch): the staged layer files are safetensors read with
the converter's own `ShardReader`, so each tensor comes back as the raw array the writer takes.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kvant_contracts.int4_artifact import module_of
from kvant_runtime.checkpoint.safetensors_io import ShardReader

GPTQ_DIR = "gptq"  # under the conversion's staging folder (see `layer_staging`)
LAYER_PATTERN = "layer-*.safetensors"

Arrays = tuple[npt.NDArray[np.generic], npt.NDArray[np.generic]]


def layer_file(directory: Path, layer: int) -> Path:
    return directory / f"layer-{layer:05d}.safetensors"


class PreRounded:
    """`weight_packed` and `weight_scale` by source weight name, for every weight GPTQ rounded."""

    def __init__(self, directory: Path) -> None:
        self._files: dict[str, Path] = {}
        for path in sorted(directory.glob(LAYER_PATTERN)):
            reader = ShardReader(path)
            reader.close()
            for name in reader.tensors:
                self._files[name] = path
        self._open: dict[Path, ShardReader] = {}
        self._lock = threading.Lock()

    def get(self, weight_name: str) -> Arrays | None:
        module = module_of(weight_name)
        packed, scale = f"{module}.weight_packed", f"{module}.weight_scale"
        if packed not in self._files:
            return None
        return self._reader(packed).read(packed), self._reader(scale).read(scale)

    def close(self) -> None:
        for reader in self._open.values():
            reader.close()

    def _reader(self, name: str) -> ShardReader:
        path = self._files[name]
        with self._lock:
            if path not in self._open:
                self._open[path] = ShardReader(path)
            return self._open[path]
