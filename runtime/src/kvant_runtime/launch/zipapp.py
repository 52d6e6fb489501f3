"""The launcher as one stdlib-only zipapp, so `kvant launch` runs in any SGLang image.

Users pick their SGLang image (a CUDA variant, a nightly for a new model), and it carries no Kvant.
The runtime image's init container writes this file into an emptyDir, and the engine container runs
it with the image's own Python. It holds the launcher's modules and the contracts they read, all
standard library only (a test runs it with no site-packages but SGLang's), so nothing needs to be
installed in the image. Entries have a fixed timestamp, so the same sources give the same bytes.
"""

from __future__ import annotations

import importlib.util
import os
import zipfile
from pathlib import Path

MODULES: tuple[str, ...] = (
    "kvant_contracts",
    "kvant_contracts.artifact_manifest",
    "kvant_contracts.cpu_serving",
    "kvant_contracts.engine_scheduler",
    "kvant_contracts.job_lines",
    "kvant_contracts.kv_dtypes",
    "kvant_contracts.launch_spec",
    "kvant_contracts.lora",
    "kvant_contracts.serving_pod",
    "kvant_contracts.weight_formats",
    "kvant_runtime",
    "kvant_runtime.launch",
    "kvant_runtime.launch.argv",
    "kvant_runtime.launch.cpu_engine",
    "kvant_runtime.launch.launch_command",
    "kvant_runtime.launch.sglang_support",
    "kvant_runtime.launch.standalone",
    "kvant_runtime.launch.validate",
)
_MAIN = b"""import sys

from kvant_runtime.launch.standalone import main

sys.exit(main())
"""
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _entry(name: str) -> tuple[str, bytes]:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"module {name} is not installed")
    origin = Path(spec.origin)
    arcname = name.replace(".", "/") + ("/__init__.py" if origin.name == "__init__.py" else ".py")
    return arcname, origin.read_bytes()


def build_launcher(output: Path) -> Path:
    """Writes the zipapp to `output` (atomically) and returns it."""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as raw:
        raw.write(b"#!/usr/bin/env python3\n")
        with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for arcname, data in [*(_entry(m) for m in MODULES), ("__main__.py", _MAIN)]:
                info = zipfile.ZipInfo(arcname, date_time=_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, data)
    tmp.chmod(0o755)
    os.replace(tmp, output)
    return output
