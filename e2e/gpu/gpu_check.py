"""The GPU check: Kvant's convert, calibrate and eval on a synthetic ~1 B model, and FP8 KV on the GPU.

Run it with `bash e2e/gpu/run.sh` (see README.md there). Steps, each timed, in this order:

1. model: a random-weight BF16 Llama-style checkpoint from `kvant tiny-model`'s generator;
2. convert: `kvant convert` to INT4, or with every Linear layer kept in BF16 where numba is missing;
3. calibrate: `kvant calibrate --device DEVICE`, tokens/s = samples x sequence length / seconds;
4. eval: `kvant eval --device DEVICE`: the converted weights with a BF16 KV cache against the source,
   then FP8 KV with the calibrated scales and with unit scales against the artifact's own BF16 KV;
5. fp8: Kvant's CPU FP8 emulation against the device: decoding, chosen values, every float32 bit
   pattern, and the model run in float32 on both (plus `kvant eval` on both for the same samples).

Results go to OUT/summary.json after every step, so a run cut short by the time budget still leaves
what it measured. Exit code 0 when every step ran and every check passed, 1 otherwise, 2 for bad
arguments or a missing device.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import platform
import shutil
import sys
import sysconfig
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from e2e.gpu.report import render

DESCRIPTION = "Kvant's convert, calibrate and eval on a synthetic ~1 B model, and FP8 KV on the GPU."
REPO = Path(__file__).resolve().parents[2]
MODEL_TOLERANCE = 0.05  # |mean KL on the CPU - on the device| / mean KL, both in float32
SAME_COMPUTATION_TOLERANCE = 1e-6  # `kvant eval --device cpu` against the lockstep on the CPU


@dataclass(frozen=True)
class Sizes:
    calibration_samples: int
    calibration_length: int
    eval_samples: int
    eval_length: int
    compare_samples: int
    compare_length: int

    def fields(self) -> dict[str, int]:
        return {
            "calibrationSamples": self.calibration_samples,
            "calibrationLength": self.calibration_length,
            "evalSamples": self.eval_samples,
            "evalLength": self.eval_length,
            "compareSamples": self.compare_samples,
            "compareLength": self.compare_length,
        }


FULL_SIZES = Sizes(512, 2048, 16, 1024, 2, 512)
SMALL_SIZES = Sizes(8, 128, 4, 128, 2, 64)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu_check", description=DESCRIPTION)
    parser.add_argument("--out", type=Path, required=True, help="folder for results (and the models)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="default cuda")
    parser.add_argument("--small", action="store_true", help="tiny model and sizes: a smoke test of the flow")
    parser.add_argument(
        "--weights",
        choices=("int4", "bf16"),
        help="convert to INT4 (needs numba) or keep BF16 weights; default int4 where numba is installed",
    )
    parser.add_argument("--budget-seconds", type=float, default=560.0, help="skip optional steps past this")
    parser.add_argument("--keep-models", action="store_true", help="keep OUT/models (about 4 GB full size)")
    parser.add_argument("--calibration-samples", type=int)
    parser.add_argument("--calibration-length", type=int, help="tokens per calibration sample")
    parser.add_argument("--eval-samples", type=int)
    parser.add_argument("--eval-length", type=int, help="tokens per evaluation sample")
    parser.add_argument("--compare-samples", type=int, help="samples for the CPU against device model run")
    parser.add_argument("--compare-length", type=int, help="tokens per sample of that run")
    return parser.parse_args(argv)


def sizes_from(args: argparse.Namespace) -> Sizes:
    base = SMALL_SIZES if args.small else FULL_SIZES
    return Sizes(
        args.calibration_samples or base.calibration_samples,
        args.calibration_length or base.calibration_length,
        args.eval_samples or base.eval_samples,
        args.eval_length or base.eval_length,
        args.compare_samples or base.compare_samples,
        args.compare_length or base.compare_length,
    )


class Run:
    """The summary being built, saved after every step, and the time budget."""

    def __init__(self, out: Path, budget_seconds: float, summary: dict[str, Any]) -> None:
        self.out = out
        self.path = out / "summary.json"
        self.deadline = time.monotonic() + budget_seconds
        self.summary = summary
        self.summary.setdefault("steps", {})
        self.save()

    def save(self) -> None:
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(json.dumps(self.summary, indent=2, sort_keys=False) + "\n")
        os.replace(partial, self.path)

    def ok(self, name: str) -> bool:
        return bool(self.summary["steps"].get(name, {}).get("status") == "ok")

    def step(
        self,
        name: str,
        function: Callable[[], dict[str, Any]],
        needs: tuple[str, ...] = (),
        reserve_seconds: float = 0.0,
    ) -> dict[str, Any] | None:
        """Runs one step unless a step it needs did not succeed or the budget is too short for it."""
        steps = self.summary["steps"]
        left = self.deadline - time.monotonic()
        if missing := [need for need in needs if not self.ok(need)]:
            steps[name] = {"status": "skipped", "reason": f"needs {', '.join(missing)}"}
        elif left < reserve_seconds:
            steps[name] = {
                "status": "skipped",
                "reason": f"{left:.0f} s left of the budget, needs {reserve_seconds:.0f}",
            }
        else:
            _say(f"{name} ...")
            started = time.monotonic()
            try:
                result = function()
                steps[name] = {"status": "ok", **result, "seconds": round(time.monotonic() - started, 2)}
            except Exception as err:  # every step is reported; later steps that need it are skipped
                traceback.print_exc()
                steps[name] = {
                    "status": "failed",
                    "seconds": round(time.monotonic() - started, 2),
                    "error": f"{type(err).__name__}: {err}",
                }
            _release_device_memory()
            _say(f"{name}: {steps[name]['status']} ({steps[name].get('seconds', 0)} s)")
        self.save()
        return steps[name] if steps[name]["status"] == "ok" else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    # Only quantizing to INT4 needs numba (kvant_kernels.int4_kernel); reading, calibrating and
    # evaluating do not, so without it the check converts with every Linear kept in BF16.
    has_numba = importlib.util.find_spec("numba") is not None
    weights = args.weights or ("int4" if has_numba else "bf16")
    if weights == "int4" and not has_numba:
        _say("error: --weights int4 needs numba (Kvant's INT4 kernel); install it or use --weights bf16")
        return 2
    import torch  # noqa: PLC0415 - after the argument checks: a bad flag answers without loading torch

    if args.device == "cuda" and not torch.cuda.is_available():
        _say(
            "error: --device cuda, but PyTorch sees no CUDA device; "
            "for a smoke test of the flow run with --device cpu --small"
        )
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 in the CPU/device comparison
    torch.backends.cudnn.allow_tf32 = False
    run = Run(
        args.out,
        args.budget_seconds,
        {
            "finished": False,
            "startedAt": datetime.now(UTC).isoformat(timespec="seconds"),
            "device": args.device,
            "mode": "small" if args.small else "full",
            "weights": weights,
            "weightsNote": _weights_note(weights, has_numba),
            "sizes": sizes_from(args).fields(),
            "environment": _environment(torch, has_numba),
        },
    )
    run_steps(run, args, weights)
    run.summary["fp8CalibratedMeanKL"] = fp8_calibrated_mean_kl(run.summary["steps"], args.device)
    run.summary["checks"] = checks(run.summary)
    run.summary["environment"]["importedPackages"] = imported_packages()
    run.summary["finished"] = True
    run.save()
    if not args.keep_models:
        shutil.rmtree(args.out / "models", ignore_errors=True)
    print(json.dumps(run.summary, indent=2))
    print(render(run.summary))
    steps_ok = all(step["status"] == "ok" for step in run.summary["steps"].values())
    return 0 if steps_ok and all(check["passed"] for check in run.summary["checks"]) else 1


def run_steps(run: Run, args: argparse.Namespace, weights: str) -> None:
    import torch  # noqa: PLC0415

    from e2e.gpu import fp8_compare, kvant_steps  # noqa: PLC0415 - they import torch
    from kvant_runtime.checkpoint.token_windows import token_windows  # noqa: PLC0415
    from kvant_runtime.evaluate.evaluator import EVALUATION_DATA  # noqa: PLC0415

    sizes = sizes_from(args)
    device = torch.device(args.device)
    models, logs = args.out / "models", args.out / "logs"
    shutil.rmtree(models, ignore_errors=True)
    models.mkdir(parents=True)
    source, artifact = models / "source-bf16", models / f"artifact-{weights}"
    shape = kvant_steps.SMALL_MODEL if args.small else kvant_steps.FULL_MODEL
    calibration_text = kvant_steps.write_text(
        models / "calibration.txt",
        kvant_steps.CALIBRATION_TEXT,
        sizes.calibration_samples * sizes.calibration_length,
    )
    eval_text = kvant_steps.write_text(
        models / "evaluation.txt", kvant_steps.EVALUATION_TEXT, sizes.eval_samples * sizes.eval_length
    )
    compare_text = kvant_steps.write_text(
        models / "comparison.txt",
        kvant_steps.EVALUATION_TEXT,
        sizes.compare_samples * sizes.compare_length,
        seed=1,
    )

    if (model := run.step("model", lambda: kvant_steps.make_model(source, shape))) is not None:
        run.summary["model"] = {
            key: value for key, value in model.items() if key not in ("status", "seconds")
        }
    run.step("convert", lambda: kvant_steps.convert(source, artifact, weights, logs), needs=("model",))
    calibrated = run.step(
        "calibrate",
        lambda: kvant_steps.calibrate(
            artifact, args.device, sizes.calibration_samples, sizes.calibration_length, calibration_text, logs
        ),
        needs=("convert",),
    )

    def evaluate(reference: Path, kv_dtype: str, unit: bool, step: str) -> dict[str, Any]:
        return kvant_steps.evaluate(
            reference,
            artifact,
            kv_dtype=kv_dtype,
            unit_scales=unit,
            device=args.device,
            samples=sizes.eval_samples,
            sequence_length=sizes.eval_length,
            data=eval_text,
            logs=logs,
            step=step,
        )

    run.step(
        f"eval {weights} weights, bf16 KV",
        lambda: evaluate(source, "bf16", False, "eval-weights"),
        needs=("convert",),
    )
    run.step(
        "eval fp8 KV calibrated",
        lambda: evaluate(artifact, "fp8_e4m3", False, "eval-fp8-calibrated"),
        needs=("calibrate",),
    )
    run.step(
        "eval fp8 KV unit scales",
        lambda: evaluate(artifact, "fp8_e4m3", True, "eval-fp8-unit"),
        needs=("convert",),
    )
    if weights == "int4":
        run.step(
            "eval int4 + fp8 KV calibrated",
            lambda: evaluate(source, "fp8_e4m3", False, "eval-int4-fp8"),
            needs=("calibrate",),
        )

    run.step("fp8 decoding", lambda: fp8_compare.compare_decoding(device))
    scales = {"unit": 1.0}
    if calibrated is not None:
        last = len(calibrated["kScales"]) - 1
        scales |= {
            "k_scale layer 0": calibrated["kScales"][0],
            f"v_scale layer {last}": calibrated["vScales"][last],
        }
    run.step("fp8 codes", lambda: fp8_compare.compare_codes(device, scales))
    chunks = fp8_compare.QUICK_SWEEP if args.small else fp8_compare.FULL_SWEEP
    run.step("fp8 sweep", lambda: fp8_compare.sweep_float32(device, chunks), reserve_seconds=60)

    config = json.loads((source / "config.json").read_text()) if run.ok("model") else {}
    compare_samples = (
        token_windows(
            artifact,
            int(config.get("vocab_size", 0)),
            compare_text,
            EVALUATION_DATA,
            samples=sizes.compare_samples,
            sequence_length=sizes.compare_length,
        ).samples
        if run.ok("calibrate")
        else []
    )
    reserve = 0 if args.small else 150
    run.step(
        "fp8 through the model",
        lambda: fp8_compare.compare_through_model(artifact, compare_samples, device),
        needs=("calibrate",),
        reserve_seconds=reserve,
    )

    def compare_eval(where: str) -> dict[str, Any]:
        return kvant_steps.evaluate(
            artifact,
            artifact,
            kv_dtype="fp8_e4m3",
            unit_scales=False,
            device=where,
            samples=sizes.compare_samples,
            sequence_length=sizes.compare_length,
            data=compare_text,
            logs=logs,
            step=f"eval-compare-{where}",
        )

    for where in dict.fromkeys(("cpu", args.device)):
        run.step(
            f"eval compare on {where}",
            functools.partial(compare_eval, where),
            needs=("calibrate",),
            reserve_seconds=reserve / 2,
        )


def checks(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Pass/fail statements about the results; a step that did not run gives no check."""
    steps = summary["steps"]
    found: list[dict[str, Any]] = []

    def check(name: str, passed: bool, detail: str) -> None:
        found.append({"name": name, "passed": bool(passed), "detail": detail})

    if summary["weights"] == "bf16" and (weights := _ok(steps, "eval bf16 weights, bf16 KV")):
        check(
            "BF16 artifact with a BF16 KV cache equals its source",
            weights["meanKLDivergence"] == 0 and weights["top1Agreement"] == 1,
            f"mean KL {weights['meanKLDivergence']}, top-1 {weights['top1Agreement']}",
        )
    if decoding := _ok(steps, "fp8 decoding"):
        check(
            "e4m3 decodes the same on the CPU, the device and in kvant_kernels.bits",
            decoding["cpuVsTable"] == 0 and decoding["deviceVsTable"] == 0,
            f"{decoding['cpuVsTable']} and {decoding['deviceVsTable']} of 256 codes differ",
        )
    for name in ("fp8 codes", "fp8 sweep"):
        if codes := _ok(steps, name):
            check(
                f"{name}: Kvant's CPU FP8 emulation gives the device's bytes",
                codes["torchMismatches"] == 0,
                f"{codes['torchMismatches']} bytes differ; first: {_examples(codes, 'torch')}",
            )
            if codes["hardwareMismatches"] is not None:
                check(
                    f"{name}: Kvant's CPU FP8 emulation gives the GPU instruction's bytes",
                    codes["hardwareMismatches"] == 0,
                    f"{codes['hardwareMismatches']} bytes differ; first: {_examples(codes, 'hardware')}",
                )
    if summary["device"] == "cuda" and (codes := _ok(steps, "fp8 codes")):
        check(
            "the GPU's own FP8 conversion instruction (Triton kernel) was compared",
            codes["hardware"],
            codes["hardwareUnavailable"] or "it ran",
        )
    if model := _ok(steps, "fp8 through the model"):
        for variant, entry in model["variants"].items():
            if "meanKLDifference" in entry:
                reference = entry["cpu"]["meanKLDivergence"]
                check(
                    f"{variant}: mean KL with CPU emulation and on the device agree within "
                    f"{MODEL_TOLERANCE:.0%}",
                    entry["meanKLDifference"] <= MODEL_TOLERANCE * reference + 1e-9,
                    f"|difference| {entry['meanKLDifference']:.3g} of {reference:.3g}",
                )
    on_cpu = _ok(steps, "eval compare on cpu")
    if model and on_cpu:
        lockstep = model["variants"]["fp8-calibrated"]["cpu"]["meanKLDivergence"]
        official = on_cpu["meanKLDivergence"]
        check(
            "`kvant eval --device cpu` computes what the CPU side of the comparison computes",
            abs(official - lockstep) <= SAME_COMPUTATION_TOLERANCE * max(official, 1e-12),
            f"kvant eval {official:.6g}, lockstep {lockstep:.6g}",
        )
    return found


def fp8_calibrated_mean_kl(steps: dict[str, Any], device: str) -> dict[str, float]:
    """Mean KL of calibrated FP8 KV against BF16 KV on the comparison samples, by every path that ran."""
    found: dict[str, float] = {}
    for where in dict.fromkeys(("cpu", device)):
        label = "float32, CPU emulation" if where == "cpu" else "bfloat16, torch cast on the GPU"
        if step := _ok(steps, f"eval compare on {where}"):
            found[f"kvant eval --device {where} ({label})"] = step["meanKLDivergence"]
    if model := _ok(steps, "fp8 through the model"):
        variants = model["variants"]
        found["lockstep on cpu (float32, CPU emulation)"] = variants["fp8-calibrated"]["cpu"][
            "meanKLDivergence"
        ]
        found[f"lockstep on {device} (float32, torch cast)"] = variants["fp8-calibrated"]["device"][
            "meanKLDivergence"
        ]
        if hardware := variants.get("fp8-calibrated-hardware"):
            found[f"lockstep on {device} (float32, GPU instruction)"] = hardware["device"]["meanKLDivergence"]
    return found


def imported_packages() -> list[str]:
    """Top-level packages imported from outside the standard library and this repository."""
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    names = set()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if "." in name or not file:
            continue
        path = Path(file).resolve()
        if not (path.is_relative_to(stdlib) or path.is_relative_to(REPO)):
            names.add(name)
    return sorted(names)


def _examples(codes: dict[str, Any], path: str) -> list[dict[str, Any]]:
    return [example for example in codes["examples"] if example["path"] == path][:2]


def _ok(steps: dict[str, Any], name: str) -> dict[str, Any] | None:
    step = steps.get(name)
    return step if step is not None and step.get("status") == "ok" else None


def _weights_note(weights: str, has_numba: bool) -> str:
    if weights == "int4":
        return "INT4 (pack-quantized, group 128) on every Linear layer but lm_head: what Kvant serves"
    reason = "numba is not installed" if not has_numba else "--weights bf16 was given"
    return (
        f"BF16: {reason}, so `kvant convert --ignore re:.*` kept every Linear layer in BF16 (a "
        "compressed-tensors artifact with nothing quantized); calibrate and eval ran unchanged"
    )


def _environment(torch: Any, has_numba: bool) -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "torchThreads": torch.get_num_threads(),
        "versions": {
            name: _version(name) for name in ("torch", "triton", "transformers", "safetensors", "numpy")
        },
        "numba": _version("numba") if has_numba else "absent: BF16 weights (INT4 quantizing needs numba)",
        "gpu": None,
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        env["gpu"] = torch.cuda.get_device_name(0)
        env["gpuCapability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        env["gpuMemoryGB"] = round(properties.total_memory / 1e9, 1)
        env["cuda"] = torch.version.cuda
    return env


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _release_device_memory() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _say(message: str) -> None:
    sys.stderr.write(f"gpu-check: {message}\n")
    sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main())
