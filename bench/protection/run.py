"""Goodput, retractions and 429s with and without cache protection, at 1x, 2x and 4x load,
for a BF16-KV plan and an FP8-KV plan of the same simulated GPU.

Each cell runs `kvant sim` (capacity from `kvant plan` on a tiny generated checkpoint) behind
`kvant gate` on loopback, under a closed-loop load of N clients (kvant_dev.loadgen), in three modes:
`off` (the gate only proxies), `worstCase` (enforce, each request reserves its whole max_new_tokens)
and `forecast` (enforce, each request reserves its prompt plus the learned output forecast). 1x load
is the number of clients whose worst-case requests exactly fill the BF16 plan's KV cache. Goodput
counts output tokens of requests that met the latency SLO.

Two workloads: the default, where every answer runs to its max_new_tokens (the kindest case for a
worst-case reservation), and `--realistic`, where answers stop at EOS with lengths drawn from a
lognormal (median 100 tokens) under a max_new_tokens of 600, as real clients' do.

    python bench/protection/run.py [--seconds 12] [--realistic] [--json out.json] [--plot PNG | --no-plot]

Besides the table it draws goodput against load, a panel per KV dtype and a line per mode, into
goodput.png (goodput-realistic.png with --realistic) beside this file.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from kvant_dev.loadgen import LoadResult, LoadShape, engine_retractions, generate_load
from kvant_dev.tinymodel import make_tiny_checkpoint

# Run by path, the bench has its own folder on sys.path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.plots import add_plot_arguments, goodput_by_load, plot_destination
from bench.protection.stack import GATE_MODES, plan_capacities, serving_stack

HERE = Path(__file__).parent

PROMPT, NEW = 400, 200
MODES = list(GATE_MODES)
REALISTIC_LENGTHS = "lognormal:100,0.8"  # answers' natural lengths under --realistic
REALISTIC_MAX_NEW = 600


def run_cell(
    workdir: Path, kv_tokens: int, mode: str, shape: LoadShape, *, output_lengths: str | None, warmup: float
) -> tuple[LoadResult, float]:
    lengths = ["--output-lengths", output_lengths] if output_lengths else []
    with serving_stack(workdir, kv_tokens, mode, lengths) as stack:
        if warmup:  # the forecast learns from the model's answers, as a serving gate has long done
            generate_load(stack.front, replace(shape, seconds=warmup))
        before = engine_retractions(stack.engine)
        result = generate_load(stack.front, shape)
        return result, engine_retractions(stack.engine) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--bf16-tokens", type=int, default=4096, help="KV capacity of the BF16 plan")
    parser.add_argument(
        "--slo", type=float, default=8.0, help="end-to-end latency SLO, seconds (unloaded latency ~2.7 s)"
    )
    parser.add_argument("--realistic", action="store_true", help="answers stop at EOS (see the docstring)")
    parser.add_argument(
        "--warmup", type=float, default=8.0, help="seconds of the same load before measuring (every mode)"
    )
    parser.add_argument("--json", type=Path)
    add_plot_arguments(parser, "goodput.png, or goodput-realistic.png, beside this file")
    args = parser.parse_args()
    png = plot_destination(
        parser, args, HERE / ("goodput-realistic.png" if args.realistic else "goodput.png")
    )
    new_tokens = REALISTIC_MAX_NEW if args.realistic else NEW
    lengths = REALISTIC_LENGTHS if args.realistic else None
    workdir = Path(tempfile.mkdtemp(prefix="kvant-bench-protection-"))
    checkpoint = workdir / "tiny"
    make_tiny_checkpoint(checkpoint)
    capacity = plan_capacities(checkpoint, args.bf16_tokens)
    one_x = max(1, capacity["bf16"] // (PROMPT + new_tokens))
    rows = []
    bf16, fp8 = capacity["bf16"], capacity["fp8_e4m3"]
    workload = f"answers {lengths} under max_new_tokens {new_tokens}" if lengths else f"{NEW} new tokens each"
    print(f"KV capacity: bf16 {bf16} tokens, fp8 {fp8} tokens; 1x = {one_x} clients; SLO {args.slo:g} s")
    print(f"workload: prompt {PROMPT} tokens, {workload}")
    print(
        f"{'KV':9} {'load':>4} {'mode':8} {'goodput tok/s':>13} {'retractions':>11} {'429 rate':>8} "
        f"{'completed':>9} {'late':>4} {'goodput ÷ off':>13}"
    )
    for dtype, tokens in capacity.items():
        for factor in (1, 2, 4):
            cell = {}
            for mode in MODES:
                shape = LoadShape(one_x * factor, args.seconds, PROMPT, new_tokens, args.slo)
                result, retracted = run_cell(
                    workdir, tokens, mode, shape, output_lengths=lengths, warmup=args.warmup
                )
                answered = sum(result.statuses.values()) or 1
                cell[mode] = {
                    "goodput": result.goodput,
                    "retractions": retracted,
                    "rate429": result.statuses[429] / answered,
                    "completed": result.completed,
                    "late": sum(1 for latency in result.latencies if latency > args.slo),
                }
            off = cell["off"]["goodput"]
            ratios = {m: (r["goodput"] / off if off else float("inf")) for m, r in cell.items()}
            for mode, r in cell.items():
                shown = f"{ratios[mode]:.2f}" if mode != "off" else ""
                print(
                    f"{dtype:9} {factor:>3}x {mode:9} {r['goodput']:13.0f} {r['retractions']:11.0f} "
                    f"{r['rate429']:8.2f} {r['completed']:9d} {r['late']:4d} {shown:>13}"
                )
            rows.append({"kv": dtype, "load": factor, **cell, "ratios": ratios})
    if args.json:
        summary = {"capacity": capacity, "oneX": one_x, "slo": args.slo, "workload": workload, "rows": rows}
        args.json.write_text(json.dumps(summary, indent=2))
    if png:
        title = f"prompt {PROMPT} tokens, {workload}; SLO {args.slo:g} s; 1x = {one_x} clients"
        print(f"plot: {goodput_by_load(rows, MODES, png, title)}")


if __name__ == "__main__":
    main()
