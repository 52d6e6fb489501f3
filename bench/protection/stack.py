"""What the protection benches run: an engine on loopback (`kvant sim`, or the real SGLang in
`real_engine.py`) with a front in one of the modes.

The fronts: `kvant gate` with its limits in `off` (it only proxies), `worstCase` (enforce, each
request reserves its whole max_new_tokens) or `forecast` (enforce, prompt plus the learned output
forecast); and, in `trace.py` only, `saturationDetector`, the bench's re-statement of GIE's shedding
rule (`saturation_detector.py`). Every process is stopped at the end, killed if it has not stopped 10
s after SIGTERM.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_contracts.limits import parse_limits, render_limits
from kvant_dev.netutil import free_port, http_ok, wait_until
from kvant_operator.api.spec import WeightFormat
from kvant_operator.planner.capacity_plan import PlanRequest, make_plan
from kvant_operator.planner.checkpoint_view import load_checkpoint
from kvant_operator.planner.sizing import gpu_memory_for_tokens

HERE = Path(__file__).parent
LIMITS = {
    "maxConcurrency": 64,
    "maxQueued": 8,
    "queueTimeoutSeconds": 2,
    "targetTokenUsage": 0.8,
    "concurrency": {"min": 1, "max": 64},
}
GATE_MODES = {
    "off": {"mode": "off"},
    "engine": {"mode": "enforce", "admission": "engine"},
    "worstCase": {"mode": "enforce", "admission": "worstCase"},
    "forecast": {"mode": "enforce", "admission": "forecast"},
}
DETECTOR = "saturationDetector"


def plan_capacities(checkpoint: Path, bf16_tokens: int) -> dict[str, int]:
    """KV tokens of the BF16 and FP8 plans on the one simulated GPU sized for `bf16_tokens` in BF16."""
    loaded = load_checkpoint(checkpoint)
    request = PlanRequest(
        gpu_memory_gib=1.0,
        kv_cache_dtype=KvCacheDtype.BF16,
        weights_format=WeightFormat.INT4,
        group_size=32,
        mem_fraction_static=0.9,
    )
    gib = gpu_memory_for_tokens(loaded, bf16_tokens, request)
    return {
        dtype.value: make_plan(
            loaded, replace(request, gpu_memory_gib=gib, kv_cache_dtype=dtype)
        ).kv_tokens_per_replica
        for dtype in (KvCacheDtype.BF16, KvCacheDtype.FP8_E4M3)
    }


@dataclass(frozen=True)
class Stack:
    front: str  # where load goes: the gate or the detector
    engine: str  # the simulator itself, for its metrics


@contextlib.contextmanager
def serving_stack(
    workdir: Path,
    kv_tokens: int,
    mode: str,
    sim_flags: Sequence[str] = (),
    limits: dict[str, object] | None = None,
) -> Iterator[Stack]:
    engine = free_port()
    kvant = [sys.executable, "-m", "kvant_cli.main"]
    sim = [
        *kvant,
        *("sim", "--port", str(engine), "--model-name", "bench", "--kv-tokens", str(kv_tokens)),
        *("--max-running-requests", str(max(1, kv_tokens // 256)), *sim_flags),
    ]
    proc = subprocess.Popen(sim, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with serving_front(workdir, f"http://127.0.0.1:{engine}", mode, limits) as stack:
            yield stack
    finally:
        proc.terminate()
        _stop(proc)


@contextlib.contextmanager
def serving_front(
    workdir: Path,
    engine_url: str,
    mode: str,
    limits: dict[str, object] | None = None,
    gate_flags: Sequence[str] = (),
    *,
    base: dict[str, object] | None = None,
) -> Iterator[Stack]:
    """A front in `mode` before an engine that is already serving (the simulator, or the real one);
    its limits are `base` (the simulator benches' `LIMITS` unless given: `{}` for the product's
    defaults), then `limits`, then the mode's."""
    front = free_port()
    kvant = [sys.executable, "-m", "kvant_cli.main"]
    if mode == DETECTOR:
        front_cmd = [sys.executable, str(HERE / "saturation_detector.py"), "--listen", str(front)]
        front_cmd += ["--upstream", engine_url]
    else:
        path = workdir / f"limits-{mode}.yaml"
        merged = {**(LIMITS if base is None else base), **(limits or {}), **GATE_MODES[mode]}
        path.write_text(render_limits(parse_limits(merged)))
        front_cmd = [*kvant, "gate", "--listen", f"127.0.0.1:{front}", "--upstream", engine_url]
        front_cmd += ["--limits", str(path), *gate_flags]
    proc = subprocess.Popen(front_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{front}/health"), 60, "engine + front")
        time.sleep(2)  # let the gate's local loop see a healthy engine
        yield Stack(f"http://127.0.0.1:{front}", engine_url)
    finally:
        proc.terminate()
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        # On SIGTERM aiohttp lets in-flight handlers finish; an engine queue left deep by the load
        # takes longer to drain than the bench needs to wait.
        proc.kill()
        proc.wait()
