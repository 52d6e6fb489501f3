"""Accuracy of INT4 weights and FP8 KV caches against the bf16 reference, on a small trained model.

    python bench/accuracy/run.py [--work DIR] [--train-seconds 120] [--threads 2]

1. Train a Llama-style model (4 layers, hidden 256, GQA, byte tokenizer) on text shipped in this
   repository (source and Markdown, plus the calibration prose) for a couple of minutes on CPU, so its
   next-token distributions have structure. The evaluation prose (`evaluate/data`) is held out.
2. Give it large K/V, as real models have (outlier channels beyond the e4m3 range at scale 1.0),
   without changing what it computes: k_proj and v_proj are multiplied by c, q_proj and o_proj divided
   by c, so attention scores and outputs are unchanged while K/V absmax reaches about TARGET_KV_ABSMAX.
3. Convert to INT4 (group 128 and 32), calibrate, and run `kvant eval` against the bf16 reference:
   INT4 g128, INT4 g32, INT4 g128 + FP8 KV calibrated, INT4 g128 + FP8 KV unit scales (1.0).
4. Peak memory of calibration's layer-streamed forward versus a full-model load, each in a fresh
   process, on a larger generated model (16 layers, hidden 1024).

Prints a Markdown table and writes DIR/results.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from kvant_dev.tinymodel import make_tiny_checkpoint
from kvant_runtime.calibrate.calibrator import Options, calibrate
from kvant_runtime.convert.converter import Job, run
from kvant_runtime.convert.recipe import Recipe
from kvant_runtime.evaluate.evaluator import Options as EvalOptions
from kvant_runtime.evaluate.evaluator import evaluate
from kvant_runtime.job_progress import Progress

REPO = Path(__file__).resolve().parents[2]
TRAINED: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}
LARGE: dict[str, Any] = {
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
}
TARGET_KV_ABSMAX = 2000.0  # beyond e4m3's 448 at scale 1.0, as large real models' K/V outliers are
EVAL_SAMPLES, EVAL_SEQUENCE_LENGTH = 16, 512
CALIBRATION = Options(samples=16, sequence_length=512)


def training_text() -> str:
    held_out = REPO / "runtime/src/kvant_runtime/evaluate/data"
    files = sorted(
        path
        for pattern in ("*/src/**/*.py", "**/*.md", "runtime/src/kvant_runtime/calibrate/data/*.txt")
        for path in REPO.glob(pattern)
        if held_out not in path.parents and ".git" not in path.parts
    )
    return "\n\n".join(path.read_text(encoding="utf-8", errors="ignore") for path in files)


def train(directory: Path, seconds: float) -> dict[str, Any]:
    tokenizer = AutoTokenizer.from_pretrained(directory)
    ids = torch.tensor(tokenizer(training_text(), add_special_tokens=False)["input_ids"])
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    generator = torch.Generator().manual_seed(0)
    started, steps, loss = time.monotonic(), 0, float("nan")
    while time.monotonic() - started < seconds:
        starts = torch.randint(0, len(ids) - 128, (16,), generator=generator)
        batch = torch.stack([ids[s : s + 128] for s in starts.tolist()])
        out = model(batch, labels=batch)  # transformers shifts the labels by one itself
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        steps, loss = steps + 1, float(out.loss.detach())
    save_bf16(model, directory)
    return {"tokens": len(ids), "steps": steps, "finalLoss": round(loss, 3), "seconds": round(seconds)}


def save_bf16(model: Any, directory: Path) -> None:
    """Replaces the checkpoint's weights (and their index) with the model's, in bf16."""
    for stale in [*directory.glob("*.safetensors"), directory / "model.safetensors.index.json"]:
        stale.unlink(missing_ok=True)
    model.bfloat16().save_pretrained(directory)


@torch.no_grad()
def enlarge_kv(directory: Path) -> dict[str, Any]:
    """Scales K/V up by c and Q/O down by c per layer (function-preserving) to reach TARGET_KV_ABSMAX."""
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    text = (REPO / "runtime/src/kvant_runtime/calibrate/data/01-harbour.txt").read_text()
    absmax: dict[int, float] = {}
    hooks = [
        layer.self_attn.k_proj.register_forward_hook(
            lambda _m, _i, out, index=index: absmax.__setitem__(index, float(out.abs().max()))
        )
        for index, layer in enumerate(model.model.layers)
    ]
    model(torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"][:512]]))
    for hook in hooks:
        hook.remove()
    factors = {}
    for index, layer in enumerate(model.model.layers):
        c = TARGET_KV_ABSMAX / absmax[index]
        attn = layer.self_attn
        attn.k_proj.weight.mul_(c)
        attn.q_proj.weight.div_(c)
        attn.v_proj.weight.mul_(c)
        attn.o_proj.weight.div_(c)
        factors[index] = round(c, 1)
    save_bf16(model, directory)
    return {"kvScaleUpFactors": factors, "kAbsmaxBefore": {i: round(v, 2) for i, v in absmax.items()}}


def convert(source: Path, output: Path, group_size: int) -> Path:
    run(Job(source, output, Recipe(group_size=group_size)), Progress(human=None))
    return output


def compare(reference: Path, candidate: Path, **options: Any) -> dict[str, Any]:
    result = evaluate(
        reference,
        candidate,
        EvalOptions(samples=EVAL_SAMPLES, sequence_length=EVAL_SEQUENCE_LENGTH, **options),
        lambda _: None,
    )
    return {
        key: result[key] for key in ("meanKLDivergence", "p99KLDivergence", "top1Agreement", "perplexity")
    }


def accuracy(work: Path, train_seconds: float) -> dict[str, Any]:
    reference = make_tiny_checkpoint(work / "reference", arch="llama", shards=1, **TRAINED)
    training = train(reference, train_seconds)
    enlarged = enlarge_kv(reference)
    g128 = convert(reference, work / "int4-g128", 128)
    g32 = convert(reference, work / "int4-g32", 32)
    calibration = calibrate(g128, CALIBRATION, lambda _: None)
    rows = {
        "INT4 g128": compare(reference, g128),
        "INT4 g32": compare(reference, g32),
        "INT4 g128 + FP8 KV, calibrated scales": compare(reference, g128, kv_dtype="fp8_e4m3"),
        "INT4 g128 + FP8 KV, unit scales": compare(reference, g128, kv_dtype="fp8_e4m3", unit_scales=True),
    }
    reference_ppl = evaluate(
        reference,
        reference,
        EvalOptions(samples=EVAL_SAMPLES, sequence_length=EVAL_SEQUENCE_LENGTH),
        lambda _: None,
    )["perplexity"]
    kv_absmax = max(max(layer["kAbsmax"], layer["vAbsmax"]) for layer in calibration["layers"])
    return {
        "training": training,
        **enlarged,
        "calibratedKVAbsmax": round(kv_absmax, 1),
        "referencePerplexity": reference_ppl,
        "rows": rows,
    }


_MEMORY_PROBE = """
import sys, torch
from pathlib import Path
torch.set_num_threads(2)
from transformers import AutoModelForCausalLM
from kvant_runtime.calibrate.calibrator import CALIBRATION_DATA, measure_kv_absmax
from kvant_runtime.checkpoint.token_windows import token_windows
from kvant_runtime.checkpoint.layer_reader import read_json
from kvant_runtime.checkpoint.kv_layout import kv_layout
artifact, mode = Path(sys.argv[1]), sys.argv[2]
config = read_json(artifact / "config.json")
windows = token_windows(
    artifact, config["vocab_size"], None, CALIBRATION_DATA, samples=2, sequence_length=512
)
if mode == "streamed":
    measure_kv_absmax(artifact, windows, kv_layout(config), torch.device("cpu"))
elif mode == "full":
    model = AutoModelForCausalLM.from_pretrained(artifact, dtype=torch.float32)
    with torch.no_grad():
        for ids in windows.samples:
            model(ids.unsqueeze(0))
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork + exec, so a child would report its parent's peak.
status = Path("/proc/self/status").read_text()
print(int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) * 1024)
"""


def memory(work: Path) -> dict[str, Any]:
    """Peak RSS of a fresh process per mode; `imports` (torch, transformers, the data) is the floor."""
    source = make_tiny_checkpoint(work / "large", arch="llama", shards=4, **LARGE)
    artifact = convert(source, work / "large-int4", 128)
    params = json.loads((source / "model.safetensors.index.json").read_text())["metadata"]["total_size"] // 2
    peaks = {}
    for mode in ("imports", "streamed", "full"):
        out = subprocess.run(
            [sys.executable, "-c", _MEMORY_PROBE, str(artifact), mode],
            capture_output=True,
            text=True,
            check=True,
        )
        peaks[mode] = int(out.stdout.strip().splitlines()[-1])
    return {"parameters": params, "peakRSSBytes": peaks}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/kvant-bench-accuracy"))
    parser.add_argument("--train-seconds", type=float, default=120.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    results = {"accuracy": accuracy(args.work, args.train_seconds), "memory": memory(args.work)}
    (args.work / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)


def print_table(results: dict[str, Any]) -> None:
    acc = results["accuracy"]
    print(f"reference perplexity (bf16): {acc['referencePerplexity']:.3f}; training {acc['training']}")
    print(f"K/V absmax after enlarging: {acc['calibratedKVAbsmax']} (e4m3 max at scale 1.0: 448)\n")
    print("| candidate | mean KL | p99 KL | top-1 agreement | perplexity |")
    print("|---|---|---|---|---|")
    for name, row in acc["rows"].items():
        print(
            f"| {name} | {row['meanKLDivergence']:.4g} | {row['p99KLDivergence']:.4g} | "
            f"{row['top1Agreement']:.3f} | {row['perplexity']:.3f} |"
        )
    mem = results["memory"]
    peaks = mem["peakRSSBytes"]
    print(f"\npeak RSS, {mem['parameters'] / 1e6:.0f}M-parameter model (INT4 g128 artifact, fp32 compute):")
    print("| process | peak RSS | above imports |\n|---|---|---|")
    for mode, label in (
        ("imports", "imports only"),
        ("streamed", "layer-streamed"),
        ("full", "full-model load"),
    ):
        above = (peaks[mode] - peaks["imports"]) / 2**20
        print(f"| {label} | {peaks[mode] / 2**20:.0f} MiB | {above:.0f} MiB |")


if __name__ == "__main__":
    main()
