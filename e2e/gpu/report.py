"""The GPU check's summary as a small table (standard library only, so it also runs after a timeout).

Usage: python -m e2e.gpu.report OUT/summary.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

_GIGA = 1e9


def render(summary: dict[str, Any]) -> str:
    model = summary.get("model") or {}
    env = summary.get("environment") or {}
    lines = [
        f"Kvant GPU check: device {summary.get('device')} ({env.get('gpu') or 'no GPU'}), "
        f"model {model.get('name', '?')} ({_count(model.get('parameters', 0))} parameters), "
        f"weights {summary.get('weights', '?')}",
        f"{'step':<38} {'status':<8} {'seconds':>8}  result",
    ]
    for name, step in (summary.get("steps") or {}).items():
        seconds = step.get("seconds")
        shown = f"{seconds:8.1f}" if isinstance(seconds, int | float) else f"{'':>8}"
        lines.append(f"{name:<38} {step.get('status', '?'):<8} {shown}  {_result(name, step)}")
    if mean_kl := summary.get("fp8CalibratedMeanKL"):
        lines.append("mean KL of calibrated FP8 KV vs BF16 KV on the comparison samples:")
        lines += [f"  {path:<52} {value:.6g}" for path, value in mean_kl.items()]
    not_ok = [name for name, step in (summary.get("steps") or {}).items() if step.get("status") != "ok"]
    if not_ok:
        lines.append(f"steps that did not succeed: {', '.join(not_ok)}")
    checks = summary.get("checks") or []
    passed = sum(1 for check in checks if check["passed"])
    lines.append(f"checks: {passed}/{len(checks)} passed")
    lines += [f"  FAILED {check['name']}: {check['detail']}" for check in checks if not check["passed"]]
    if not summary.get("finished"):
        lines.append("INCOMPLETE: the run stopped before its end (time budget or a crash); see log.txt")
    return "\n".join(lines)


def _result(name: str, step: dict[str, Any]) -> str:
    if step.get("status") == "skipped":
        return str(step.get("reason", ""))
    if step.get("status") == "failed":
        return str(step.get("error", ""))[:120]
    describe = _eval if name.startswith("eval") else _DESCRIBE.get(name)
    return describe(step) if describe is not None else ""


def _eval(step: dict[str, Any]) -> str:
    return (
        f"mean KL {step['meanKLDivergence']:.3g}, p99 KL {step['p99KLDivergence']:.3g}, "
        f"top-1 {step['top1Agreement']:.4f}"
    )


def _codes(step: dict[str, Any]) -> str:
    count = step.get("values", step.get("bitPatterns"))
    torch, hardware = step["torchMismatches"], step["hardwareMismatches"]
    hardware = "not run (needs a GPU)" if hardware is None else hardware
    return f"{count} values: bytes differing, torch {torch}, GPU instruction {hardware}"


def _through_model(step: dict[str, Any]) -> str:
    return "; ".join(
        f"{variant} |dKL| {entry['meanKLDifference']:.2g}"
        for variant, entry in step["variants"].items()
        if "meanKLDifference" in entry
    )


_DESCRIBE: dict[str, Callable[[dict[str, Any]], str]] = {
    "model": lambda step: f"{_count(step['parameters'])} parameters, {step['bytes'] / _GIGA:.3g} GB",
    "convert": lambda step: (
        f"{step['weights']}, {step['artifactBytes'] / _GIGA:.3g} GB, {step['sourceGBPerSecond']} GB/s"
    ),
    "calibrate": lambda step: (
        f"{step['tokens']} tokens on {step['device']}: {step['tokensPerSecond']:.0f} tokens/s"
    ),
    "fp8 decoding": lambda step: (
        f"codes decoding differently: cpu {step['cpuVsTable']}, device {step['deviceVsTable']} of 256"
    ),
    "fp8 codes": _codes,
    "fp8 sweep": _codes,
    "fp8 through the model": _through_model,
}


def _count(parameters: int) -> str:
    return f"{parameters / _GIGA:.2f} B" if parameters >= _GIGA / 10 else f"{parameters / 1e6:.2f} M"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m e2e.gpu.report OUT/summary.json\n")
        return 2
    path = Path(argv[0])
    if not path.is_file():
        sys.stderr.write(f"{path}: no summary (the check stopped before its first step ended)\n")
        return 1
    print(render(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
