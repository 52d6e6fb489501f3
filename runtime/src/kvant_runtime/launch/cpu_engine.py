"""What SGLang 0.5's CPU backend needs, decided at launch from the CPU the pod landed on.

Checked against SGLang 0.5.23's own source (`srt/server_args.py`, `srt/utils`, `srt/layers`):
- `SGLANG_USE_CPU_ENGINE=1` in the environment and `--device cpu`;
- `--attention-backend`: SGLang's x86 default is `intel_amx`, whose kernels need Intel AMX; without
  AMX the engine starts only with `torch_native`;
- `--sleep-on-idle`: otherwise the scheduler busy-polls a core while no request is running.

What cannot run on a CPU without AMX is refused here, before a byte of weights loads, with the reason
(the operator shows it as Degraded): an FP8 KV cache ("CPU FP8 KV cache requires Intel AMX support")
and FP8 weights use sgl-kernel's AMX ops. INT4 (compressed-tensors W4A16) has only CUDA kernels in
SGLang 0.5, so it is refused on any CPU, and so is an e5m2 KV cache. Standard library and
kvant_contracts only: this module runs in the zipapp.
"""

from __future__ import annotations

from pathlib import Path

from kvant_contracts.cpu_serving import CPU_E5M2_REASON
from kvant_contracts.kv_dtypes import KvCacheDtype

ENGINE_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}
# The CPU flags AMX announces in /proc/cpuinfo; SGLang's AMX kernels use tiles with bf16 and int8.
_AMX_FLAGS = frozenset({"amx_tile", "amx_bf16"})
AMX_BACKEND, PORTABLE_BACKEND = "intel_amx", "torch_native"


def has_amx(cpuinfo: str) -> bool:
    """Whether the `flags` lines of a /proc/cpuinfo text announce AMX (tiles and bf16)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split()) >= _AMX_FLAGS
    return False


def node_has_amx(cpuinfo_path: Path = Path("/proc/cpuinfo")) -> bool:
    try:
        return has_amx(cpuinfo_path.read_text())
    except OSError:
        return False  # no cpuinfo (not Linux): assume the portable path


def attention_backend(amx: bool) -> str:
    return AMX_BACKEND if amx else PORTABLE_BACKEND


def cpu_flags(amx: bool, engine_args: list[str]) -> list[str]:
    """The CPU backend's flags; an `--attention-backend` in engineArgs is the user's choice and wins."""
    flags = ["--device", "cpu", "--sleep-on-idle"]
    if not any(a.split("=", 1)[0] == "--attention-backend" for a in engine_args):
        flags += ["--attention-backend", attention_backend(amx)]
    return flags


def cpu_refusal(weights_format: str, kv_cache_dtype: str, amx: bool) -> str | None:
    """Why this spec cannot serve on this CPU, or None."""
    if weights_format == "int4":
        return (
            "spec.weights.format int4 (compressed-tensors W4A16) has only CUDA kernels in SGLang 0.5: "
            "serve it with spec.serving.device cuda, or use format bf16 on CPU"
        )
    if kv_cache_dtype == KvCacheDtype.FP8_E5M2:
        return f"spec.kvCache.dtype {KvCacheDtype.FP8_E5M2}: {CPU_E5M2_REASON}"
    if amx:
        return None
    if kv_cache_dtype.startswith("fp8"):
        return (
            f"spec.kvCache.dtype {kv_cache_dtype} needs a CPU with Intel AMX (SGLang: 'CPU FP8 KV cache "
            "requires Intel AMX support'), and this node's CPU has none: use kvCache.dtype bf16 (or auto) "
            "on this node, or schedule the model on AMX nodes (Xeon Sapphire Rapids or later)"
        )
    if weights_format == "fp8":
        return (
            "spec.weights.format fp8 runs on CPU only with Intel AMX kernels, and this node's CPU has none: "
            "use format bf16 on this node, or schedule the model on AMX nodes"
        )
    return None
