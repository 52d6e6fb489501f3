"""GPTQ for real: Kvant's GPTQ INT4 against round-to-nearest and llm-compressor's GPTQ, with FP8 KV.

    python bench/accuracy/gptq.py [--work DIR] [--threads 2] [--repeats 1] [--json]
        [--samples 128] [--sequence-length 2048] [--calibration-data PATH] [--eval-data PATH]
        [--kvant-gptq DIR] [--llmcompressor-python PYTHON]

1. Model: the tiny trained chat model (`kvant_dev.tinychat.ensure_tiny_chat_model()`: Llama GQA,
   its own BPE tokenizer), in BF16, is the reference. Group size: the largest Kvant supports (128, 64,
   32) that divides every Linear's input dimension (hidden, intermediate, heads x head_dim).
2. Three INT4 artifacts at that group size, every Linear but lm_head quantized:
   - RTN: `kvant convert SRC OUT --format int4 --group-size G --targets all-linear`;
   - Kvant GPTQ: the same plus `--method gptq --samples S --sequence-length L --damp D --act-order`
     (or a given folder, `--kvant-gptq`, whose time and memory are then not measured);
   - llm-compressor GPTQ: `llmcompressor_gptq.py` in the bench-only venv that
     `hack/bench-llmcompressor-env.sh` builds (GPTQModifier, scheme W4A16, targets Linear, ignore
     lm_head, the same dampening, actorder "weight" = Kvant's fixed-group act-order, or none),
     calibrated on exactly the token windows Kvant's GPTQ uses (`checkpoint.token_windows.token_windows` with
     `grow_builtin=True`: the built-in calibration prose followed by the standard library's docstrings
     up to samples x sequence length, or `--calibration-data`; passed as token ids, and checked
     against the sample and token counts Kvant's GPTQ logs), saved with save_compressed=True
     (compressed-tensors pack-quantized).
   Each conversion is a fresh process with the same OMP_NUM_THREADS, started from a small launcher
   process (so its ru_maxrss is not inherited from this one): wall time of the whole process
   (imports, loading, calibration, rounding, saving; the median of `--repeats` runs) and peak RSS
   (wait4's ru_maxrss, children included; the largest over the runs). A process that only imports
   what each GPTQ run imports gives the floor of each venv (their torch builds differ). The machine
   may be doing other work meanwhile: read the times as rough.
3. FP8 KV, emulated: for each artifact, the K/V absmax per layer from a layer-streamed forward pass on
   the built-in calibration text (`calibrator.measure_kv_absmax`) gives e4m3 scales
   (`calibrator.scales_for`, stored as float32), which is what `kvant calibrate` computes and writes.
   Then candidate and reference run in lockstep, one decoder layer at a time (as `kvant eval` does),
   on the evaluation text (the built-in one, held out from calibration, or `--eval-data`), the
   candidate's attention reading K/V quantize-dequantized through e4m3 with those scales: mean
   KL(reference || candidate) over all positions, and top-1 agreement (`evaluate.agreement`).
   Why not `kvant calibrate` + `kvant eval` for all three: `kvant calibrate` takes only a published
   Kvant artifact (kvant-manifest.json), and llm-compressor's folder is not one. So every row uses the
   in-bench path above (the same library functions), and for the two Kvant artifacts the bench also
   runs the real `kvant calibrate` and `kvant eval --kv-dtype fp8_e4m3` and prints whether their
   numbers equal the in-bench ones.
   A context row, BF16 weights with the same emulated FP8 KV, shows how much of the KL is the cache's.
4. Goals: Kvant GPTQ's mean KL below RTN's, and at most 1.1x llm-compressor's.

Prints a Markdown table (method | mean KL | top-1 agreement | time s | peak RSS MiB) and the two goal
ratios, or with --json the results, which are always written to DIR/results.json; logs of every
subprocess go to DIR/logs/.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kvant_dev.tinychat import ensure_tiny_chat_model
from kvant_kernels.int4 import GROUP_SIZES
from kvant_runtime.calibrate.calibrator import CALIBRATION_DATA, measure_kv_absmax, scales_for
from kvant_runtime.checkpoint.kv_layout import kv_layout
from kvant_runtime.checkpoint.kv_tap import KVTap
from kvant_runtime.checkpoint.layer_reader import read_json
from kvant_runtime.checkpoint.token_windows import TokenWindows, token_windows
from kvant_runtime.evaluate.evaluator import EVALUATION_DATA, run_lockstep

REPO = Path(__file__).resolve().parents[2]
LLMCOMPRESSOR_SCRIPT = Path(__file__).resolve().parent / "llmcompressor_gptq.py"
ENV_SCRIPT = REPO / "hack" / "bench-llmcompressor-env.sh"
KV_DTYPE = "fp8_e4m3"
CPU = torch.device("cpu")
KL_GOAL_VS_LLMCOMPRESSOR = 1.1
ROWS = {
    "bf16": "BF16 weights (context: FP8 KV alone)",
    "rtn": "RTN INT4",
    "kvant-gptq": "Kvant GPTQ INT4",
    "llmcompressor-gptq": "llm-compressor GPTQ INT4",
}

# Runs argv[2:] as a child and writes its wall time and peak RSS to argv[1]. It is a small process of
# its own: Linux carries ru_maxrss across fork + exec, so a child forked straight from the bench (with
# torch loaded) would report at least the bench's size; forked from here it starts from this one's.
_LAUNCHER = r"""
import json, os, sys, time
result, command = sys.argv[1], sys.argv[2:]
started = time.monotonic()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(command[0], command)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
seconds = time.monotonic() - started
with open(result, "w") as out:
    code = os.waitstatus_to_exitcode(status)
    json.dump({"seconds": seconds, "maxRSSKiB": usage.ru_maxrss, "exitCode": code}, out)
"""


class BenchError(RuntimeError):
    pass


@dataclass(frozen=True)
class Setup:
    args: argparse.Namespace
    model: Path
    config: dict[str, Any]
    group_size: int
    work: Path
    kvant: Path  # the `kvant` command of this venv
    llmcompressor: Path  # python of the bench-only venv
    env: dict[str, str]

    def windows(
        self,
        package: str,
        samples: int,
        sequence_length: int,
        data: Path | None = None,
        grow_builtin: bool = False,
    ) -> TokenWindows:
        vocab = int(self.config["vocab_size"])
        return token_windows(
            self.model,
            vocab,
            data,
            package,
            samples=samples,
            sequence_length=sequence_length,
            grow_builtin=grow_builtin,
        )


def main() -> None:
    args = _arguments()
    torch.set_num_threads(args.threads)
    (args.work / "logs").mkdir(parents=True, exist_ok=True)
    model = args.model or ensure_tiny_chat_model()
    config = read_json(model / "config.json")
    setup = Setup(
        args,
        model,
        config,
        args.group_size or largest_group_size(config),
        args.work,
        Path(sys.executable).parent / "kvant",
        args.llmcompressor_python or llmcompressor_python(),
        {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)},
    )
    # What `kvant convert --method gptq` calibrates on (`gptq.model_pass`): the built-in prose grown with
    # the standard library's docstrings to samples x sequence length, or the given text.
    calibration = setup.windows(
        CALIBRATION_DATA, args.samples, args.sequence_length, args.calibration_data, grow_builtin=True
    )
    artifacts, costs = convert_all(setup, calibration)
    kv_windows = setup.windows(CALIBRATION_DATA, args.kv_samples, args.kv_sequence_length)
    eval_windows = setup.windows(
        EVALUATION_DATA, args.eval_samples, args.eval_sequence_length, args.eval_data
    )
    rows: dict[str, dict[str, Any]] = {}
    for key, artifact in artifacts.items():
        scales = kv_scales(artifact, kv_windows)
        tap = KVTap(kv_layout(read_json(artifact / "config.json"), KV_DTYPE).kind, scales, kv_dtype=KV_DTYPE)
        rows[key] = {
            "artifact": str(artifact),
            "kvScales": {str(layer): list(pair) for layer, pair in scales.items()},
            "fp8KV": compare(model, artifact, eval_windows.samples, tap),
            "bf16KV": compare(model, artifact, eval_windows.samples, None),
            "cost": costs[key],
        }
    results = {
        "model": str(model),
        "config": {key: config[key] for key in ("hidden_size", "intermediate_size", "num_hidden_layers")},
        "groupSize": setup.group_size,
        "gptq": {
            "samples": args.samples,
            "sequenceLength": args.sequence_length,
            "damp": args.damp,
            "actOrder": args.act_order,
            "calibration": _describe(calibration),
            "llmcompressorDtype": args.llmcompressor_dtype,
            "llmcompressorPython": str(setup.llmcompressor),
        },
        "kvCache": {"dtype": KV_DTYPE, "scalesFrom": _describe(kv_windows)},
        "evaluation": _describe(eval_windows),
        "threads": args.threads,
        "repeats": args.repeats,
        "importsOnly": imports_only(setup),
        "rows": rows,
        "kvantCliCrossCheck": {
            key: kvant_cli_check(setup, artifacts[key], rows[key]) for key in ("rtn", "kvant-gptq")
        },
        "goals": goals(rows),
    }
    (args.work / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_report(results)


def convert_all(
    setup: Setup, calibration: TokenWindows
) -> tuple[dict[str, Path], dict[str, dict[str, Any] | None]]:
    """The three INT4 artifacts (and the BF16 source), with each conversion's time and peak RSS."""
    args, work = setup.args, setup.work
    tokens_file = work / "calibration-tokens.json"
    tokens_file.write_text(json.dumps({"samples": [w.tolist() for w in calibration.samples]}) + "\n")
    convert = [str(setup.kvant), "convert", str(setup.model)]
    common = ["--format", "int4", "--group-size", str(setup.group_size), "--targets", "all-linear"]
    gptq_flags = [
        *("--method", "gptq", "--samples", str(args.samples), "--sequence-length", str(args.sequence_length)),
        *("--damp", str(args.damp), "--act-order" if args.act_order else "--no-act-order"),
        *(["--data", str(args.calibration_data)] if args.calibration_data is not None else []),
    ]
    artifacts: dict[str, Path] = {"bf16": setup.model}
    costs: dict[str, dict[str, Any] | None] = {"bf16": None}
    artifacts["rtn"] = work / "rtn"
    costs["rtn"] = measured(setup, "rtn", [*convert, str(artifacts["rtn"]), *common])
    if args.kvant_gptq is not None:
        artifacts["kvant-gptq"], costs["kvant-gptq"] = args.kvant_gptq, None
    else:
        artifacts["kvant-gptq"] = work / "kvant-gptq"
        command = [*convert, str(artifacts["kvant-gptq"]), *common, *gptq_flags]
        costs["kvant-gptq"] = measured(setup, "kvant-gptq", command)
        check_same_calibration(work / "logs" / "kvant-gptq.run1.log", calibration)
    artifacts["llmcompressor-gptq"] = work / "llmcompressor-gptq"
    command = [
        *(str(setup.llmcompressor), str(LLMCOMPRESSOR_SCRIPT), str(setup.model)),
        str(artifacts["llmcompressor-gptq"]),
        *("--tokens", str(tokens_file), "--group-size", str(setup.group_size), "--damp", str(args.damp)),
        *("--actorder", "weight" if args.act_order else "none", "--dtype", args.llmcompressor_dtype),
    ]
    costs["llmcompressor-gptq"] = measured(setup, "llmcompressor-gptq", command)
    return artifacts, costs


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/kvant-bench-gptq"))
    parser.add_argument("--model", type=Path, help="BF16 source (default: the tiny chat model)")
    parser.add_argument("--group-size", type=int, help="default: the largest the model's dims allow")
    parser.add_argument("--samples", type=int, default=128, help="GPTQ calibration samples")
    parser.add_argument("--sequence-length", type=int, default=2048, help="GPTQ tokens per sample")
    parser.add_argument(
        "--calibration-data",
        type=Path,
        metavar="PATH",
        help="GPTQ calibration text, as `kvant convert --data` (default: built-in); KV scales: built-in",
    )
    parser.add_argument("--damp", type=float, default=0.01)
    parser.add_argument("--act-order", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--kv-samples", type=int, default=512, help="as `kvant calibrate` (default 512)")
    parser.add_argument("--kv-sequence-length", type=int, default=2048)
    parser.add_argument("--eval-samples", type=int, default=16, help="as `kvant eval` (default 16)")
    parser.add_argument("--eval-sequence-length", type=int, default=512)
    parser.add_argument(
        "--eval-data",
        type=Path,
        metavar="PATH",
        help="evaluation text, as `kvant eval --data` (default: built-in)",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of each conversion; the table shows the median time"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads, here and in every conversion")
    parser.add_argument(
        "--kvant-gptq",
        type=Path,
        metavar="DIR",
        help="use this Kvant GPTQ artifact instead of converting (its KV scales are recalibrated in place)",
    )
    parser.add_argument(
        "--llmcompressor-python",
        type=Path,
        metavar="PYTHON",
        help="python of a venv with llm-compressor (default: what hack/bench-llmcompressor-env.sh prints)",
    )
    parser.add_argument(
        "--llmcompressor-dtype", default="auto", help="dtype llm-compressor loads the model in"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    return parser.parse_args()


def largest_group_size(config: dict[str, Any]) -> int:
    heads, hidden = int(config["num_attention_heads"]), int(config["hidden_size"])
    dims = {hidden, int(config["intermediate_size"]), heads * int(config.get("head_dim") or hidden // heads)}
    for size in sorted(GROUP_SIZES, reverse=True):
        if all(dim % size == 0 for dim in dims):
            return size
    raise BenchError(f"no INT4 group size in {GROUP_SIZES} divides the model's dimensions {sorted(dims)}")


def llmcompressor_python() -> Path:
    out = subprocess.run(["bash", str(ENV_SCRIPT)], stdout=subprocess.PIPE, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def measured(setup: Setup, name: str, command: list[str]) -> dict[str, Any]:
    """Runs a conversion `command` that writes `work/name` (removed first, so nothing is resumed)
    `--repeats` times; returns the median wall time and the largest peak RSS, and every run's."""
    runs = []
    for run in range(setup.args.repeats):
        shutil.rmtree(setup.work / name, ignore_errors=True)
        runs.append(launch(setup, f"{name}.run{run + 1}", command))
    return {
        "seconds": round(statistics.median(run["seconds"] for run in runs), 2),
        "peakRSSMiB": max(run["peakRSSMiB"] for run in runs),
        "runs": runs,
    }


def launch(setup: Setup, name: str, command: list[str]) -> dict[str, Any]:
    """Wall time and peak RSS of `command`, run from the launcher; output in logs/NAME.log."""
    result, log = setup.work / "logs" / f"{name}.cost.json", setup.work / "logs" / f"{name}.log"
    with log.open("w") as handle:
        subprocess.run(
            [sys.executable, "-I", "-c", _LAUNCHER, str(result), *command],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=setup.env,
            check=True,
        )
    cost: dict[str, Any] = json.loads(result.read_text())
    if cost["exitCode"] != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise BenchError(f"{name} exited {cost['exitCode']}; the end of {log}:\n{tail}")
    return {"seconds": round(cost["seconds"], 2), "peakRSSMiB": round(cost["maxRSSKiB"] / 1024, 1)}


def check_same_calibration(log: Path, calibration: TokenWindows) -> None:
    """Kvant's GPTQ reports how many samples and tokens it calibrated on; llm-compressor gets
    `calibration`, so the two must agree."""
    found = re.search(r"GPTQ: \d+ decoder layers, (\d+) samples \((\d+) tokens\)", log.read_text())
    seen = (int(found[1]), int(found[2])) if found else None
    if seen != (len(calibration.samples), calibration.tokens):
        raise BenchError(
            f"Kvant's GPTQ calibrated on {seen} (samples, tokens) per {log}, the bench's windows are "
            f"{(len(calibration.samples), calibration.tokens)}: llm-compressor would see other data"
        )


def imports_only(setup: Setup) -> dict[str, Any]:
    """Peak RSS and time of a process that only imports what each GPTQ run imports (the floor)."""
    kvant_python = str(Path(sys.executable))
    kvant_imports = "import kvant_runtime.convert.converter, kvant_runtime.gptq.model_pass"
    llmc_imports = "import transformers, datasets, llmcompressor, llmcompressor.modifiers.gptq"
    return {
        "kvant-gptq": launch(setup, "imports-kvant", [kvant_python, "-c", kvant_imports]),
        "llmcompressor-gptq": launch(
            setup, "imports-llmcompressor", [str(setup.llmcompressor), "-c", llmc_imports]
        ),
    }


def kv_scales(artifact: Path, windows: TokenWindows) -> dict[int, tuple[float, float]]:
    """Per-layer (k_scale, v_scale) as `kvant calibrate` computes and stores them (float32)."""
    layout = kv_layout(read_json(artifact / "config.json"), KV_DTYPE)
    absmax = measure_kv_absmax(artifact, windows, layout, CPU)
    scales = scales_for(layout, absmax, KV_DTYPE)

    def stored(name: str) -> float:
        return float(torch.tensor(scales[name], dtype=torch.float32))

    return {
        layer: (stored(layout.scale_names(layer)[0]), stored(layout.scale_names(layer)[1]))
        for layer in range(layout.layers)
    }


def compare(
    reference: Path, candidate: Path, samples: list[torch.Tensor], tap: KVTap | None
) -> dict[str, Any]:
    """Reference and candidate layer by layer in lockstep, as `kvant eval` runs them (its own function);
    the candidate's K/V go through `tap`."""
    return run_lockstep(reference, candidate, samples, tap, device=CPU, say=lambda _: None).summary()


def kvant_cli_check(setup: Setup, artifact: Path, row: dict[str, Any]) -> dict[str, Any]:
    """`kvant calibrate` then `kvant eval --kv-dtype fp8_e4m3` on a Kvant artifact, against the row."""
    args, kvant, name = setup.args, str(setup.kvant), artifact.name
    calibrate = [kvant, "calibrate", str(artifact), "--kv-dtype", KV_DTYPE]
    calibrate += ["--samples", str(args.kv_samples), "--sequence-length", str(args.kv_sequence_length)]
    calibration = _json_result(setup, f"{name}-calibrate", calibrate)
    evaluate = [kvant, "eval", str(setup.model), str(artifact), "--kv-dtype", KV_DTYPE, "--json"]
    evaluate += ["--samples", str(args.eval_samples), "--sequence-length", str(args.eval_sequence_length)]
    if args.eval_data is not None:
        evaluate += ["--data", str(args.eval_data)]
    evaluation = _json_result(setup, f"{name}-eval", evaluate)
    cli_scales = {
        str(layer["layer"]): [
            float(torch.tensor(layer[key], dtype=torch.float32)) for key in ("kScale", "vScale")
        ]
        for layer in calibration["layers"]
    }
    ours = row["fp8KV"]
    return {
        "meanKLDivergence": evaluation["meanKLDivergence"],
        "top1Agreement": evaluation["top1Agreement"],
        "sameScales": cli_scales == row["kvScales"],
        "sameMetrics": evaluation["meanKLDivergence"] == ours["meanKLDivergence"]
        and evaluation["top1Agreement"] == ours["top1Agreement"],
        "klDifference": abs(evaluation["meanKLDivergence"] - ours["meanKLDivergence"]),
    }


def _json_result(setup: Setup, name: str, command: list[str]) -> dict[str, Any]:
    result, log = setup.work / "logs" / f"{name}.json", setup.work / "logs" / f"{name}.log"
    with log.open("w") as handle:
        subprocess.run(
            [*command, "--result", str(result)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=setup.env,
            check=True,
        )
    parsed: dict[str, Any] = json.loads(result.read_text())
    return parsed


def _describe(windows: TokenWindows) -> dict[str, Any]:
    digest = hashlib.sha256()
    for sample in windows.samples:
        digest.update(sample.numpy().astype("<i8").tobytes())
    return {
        "source": windows.source,
        "samples": len(windows.samples),
        "tokens": windows.tokens,
        "tokensSha256": digest.hexdigest(),
    }


def goals(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    kl = {key: rows[key]["fp8KV"]["meanKLDivergence"] for key in ("rtn", "kvant-gptq", "llmcompressor-gptq")}
    versus_rtn = kl["kvant-gptq"] / kl["rtn"]
    versus_llmc = kl["kvant-gptq"] / kl["llmcompressor-gptq"]
    out: dict[str, Any] = {
        "klKvantOverRtn": versus_rtn,
        "klKvantOverRtnMet": versus_rtn < 1.0,
        "klKvantOverLlmcompressor": versus_llmc,
        "klKvantOverLlmcompressorMet": versus_llmc <= KL_GOAL_VS_LLMCOMPRESSOR,
    }
    kvant_cost, llmc_cost = rows["kvant-gptq"]["cost"], rows["llmcompressor-gptq"]["cost"]
    if kvant_cost is not None and llmc_cost is not None:
        out["timeKvantOverLlmcompressor"] = kvant_cost["seconds"] / llmc_cost["seconds"]
        out["peakRSSKvantOverLlmcompressor"] = kvant_cost["peakRSSMiB"] / llmc_cost["peakRSSMiB"]
    return out


def print_report(results: dict[str, Any]) -> None:
    gptq, evaluation = results["gptq"], results["evaluation"]
    print(
        f"model {results['model']} {results['config']}; INT4 group size {results['groupSize']}; "
        f"FP8 KV {results['kvCache']['dtype']} (emulated, calibrated scales); {results['threads']} threads"
    )
    print(
        f"GPTQ calibration: {gptq['calibration']['samples']} samples, {gptq['calibration']['tokens']} tokens "
        f"({gptq['calibration']['source']}); damp {gptq['damp']}; act-order {gptq['actOrder']}; "
        f"evaluation: {evaluation['samples']} samples, {evaluation['tokens']} tokens "
        f"({evaluation['source']}); time: whole process, "
        + (f"median of {results['repeats']} runs\n" if results["repeats"] > 1 else "one run\n")
    )
    print("| method | mean KL | top-1 agreement | time s | peak RSS MiB |")
    print("|---|---|---|---|---|")
    for key, label in ROWS.items():
        row = results["rows"][key]
        metrics, cost = row["fp8KV"], row["cost"]
        seconds = f"{cost['seconds']:.1f}" if cost else "-"
        rss = f"{cost['peakRSSMiB']:.0f}" if cost else "-"
        print(
            f"| {label} | {metrics['meanKLDivergence']:.4g} | {metrics['top1Agreement']:.4f} | "
            f"{seconds} | {rss} |"
        )
    goal = results["goals"]
    print(
        f"\nKvant GPTQ KL / RTN KL = {goal['klKvantOverRtn']:.3f} (goal < 1: "
        f"{'met' if goal['klKvantOverRtnMet'] else 'NOT met'})"
    )
    print(
        f"Kvant GPTQ KL / llm-compressor GPTQ KL = {goal['klKvantOverLlmcompressor']:.3f} "
        f"(goal <= {KL_GOAL_VS_LLMCOMPRESSOR}: {'met' if goal['klKvantOverLlmcompressorMet'] else 'NOT met'})"
    )
    if "timeKvantOverLlmcompressor" in goal:
        print(
            f"Kvant GPTQ / llm-compressor GPTQ: time {goal['timeKvantOverLlmcompressor']:.2f}x, "
            f"peak RSS {goal['peakRSSKvantOverLlmcompressor']:.2f}x"
        )
    floor = results["importsOnly"]
    print(
        f"imports alone (peak RSS): Kvant venv {floor['kvant-gptq']['peakRSSMiB']:.0f} MiB, "
        f"llm-compressor venv {floor['llmcompressor-gptq']['peakRSSMiB']:.0f} MiB"
    )
    weights_only = ", ".join(
        f"{ROWS[key].split(' (')[0]} {results['rows'][key]['bf16KV']['meanKLDivergence']:.4g}"
        for key in ROWS
        if key != "bf16"
    )
    print(f"mean KL with a BF16 KV cache (weights only): {weights_only}")
    for key, check in results["kvantCliCrossCheck"].items():
        same = "equal" if check["sameMetrics"] and check["sameScales"] else "DIFFERENT"
        print(
            f"cross-check {ROWS[key]}: `kvant calibrate` + `kvant eval --kv-dtype {KV_DTYPE}` give mean KL "
            f"{check['meanKLDivergence']:.6g}, top-1 {check['top1Agreement']:.4f}: {same} "
            f"(scales {'equal' if check['sameScales'] else 'differ'}, |dKL| {check['klDifference']:.3g})"
        )


if __name__ == "__main__":
    main()
