"""BF16 vs FP8 KV: throughput against concurrency for a 1T-class MLA model, in virtual time.

The KV capacity and bytes per token come from the planner (`kvant plan --json`
on a Kimi-K2-shaped config, INT4 experts, 8 x H200), read the way
`kvant sim --plan` reads them. Each concurrency level runs a closed loop:
N clients each send a long-prompt request and send the next as soon as the
previous one finishes. The engine is the simulator's own (`kvant_runtime.sim`),
driven on a virtual clock, so the sweep is deterministic and takes seconds.

    python bench/engine_sim/sweep.py [--output-lengths SPEC --max-new-tokens N] [--json results.json]
                                     [--plot PNG | --no-plot]

By default every answer runs to its 2,000 tokens. With `--output-lengths` (the simulator's own flag:
`lognormal:MEDIAN,SIGMA` or `file:PATH`) answers stop at a natural length drawn per request under
`--max-new-tokens`, as real ones stop at EOS, while admission still plans for the whole limit as
SGLang's does.

Besides the table it draws the running batch and the throughput against concurrency, BF16 and FP8,
into batch.png beside this file (batch-eos.png with --output-lengths).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from kvant_runtime.sim.cost import CostModel
from kvant_runtime.sim.engine import Engine, EngineConfig, Request
from kvant_runtime.sim.output_lengths import OutputLengths, OutputLengthsError, parse_output_lengths
from kvant_runtime.sim.plan_file import PlanCapacity, read_plan_capacity

# Run by path, the bench has its own folder on sys.path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.plots import add_plot_arguments, batch_by_concurrency, plot_destination

HERE = Path(__file__).parent
CONCURRENCY = (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128)
PROMPT_TOKENS = 24_000
OUTPUT_TOKENS = 2_000
WARMUP_S = 120.0
MEASURE_S = 600.0


@dataclass
class Point:
    concurrency: int
    output_tokens_per_s: float
    retractions: int
    mean_running: float


def plan(kv_dtype: str) -> PlanCapacity:
    """The planner's capacity for the bench model with this KV dtype."""
    command = [
        sys.executable,
        "-m",
        "kvant_cli.main",
        "plan",
        "--config",
        str(HERE / "kimi_k2_config.json"),
        "--tp",
        "8",
    ]
    command += ["--gpu-memory-gib", "141", "--weights", "int4", "--group-size", "32"]
    command += ["--kv-dtype", kv_dtype, "--json"]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
        handle.write(out)
        handle.flush()
        return read_plan_capacity(Path(handle.name))


def run_closed_loop(
    capacity: PlanCapacity,
    concurrency: int,
    output_lengths: OutputLengths | None = None,
    max_new_tokens: int = OUTPUT_TOKENS,
) -> Point:
    cost = CostModel(kv_bytes_per_token=capacity.kv_bytes_per_token or CostModel.kv_bytes_per_token)
    config = EngineConfig(
        kv_tokens=capacity.kv_tokens,
        max_running_requests=256,
        context_length=131072,
        cost=cost,
        output_lengths=output_lengths,
    )
    engine = Engine(config)
    sent = 0

    def send(now: float) -> Request:
        nonlocal sent
        sent += 1
        return engine.submit(f"r{sent}", PROMPT_TOKENS, max_new_tokens, now, prompt_key=str(sent))

    for _ in range(concurrency):
        send(0.0)
    now, tokens, retractions, running_time = 0.0, 0, 0, 0.0
    end = WARMUP_S + MEASURE_S
    while now < end:
        step = engine.step(now)
        assert step is not None, "a closed loop never idles"
        if now >= WARMUP_S:
            tokens += len(step.tokens)
            retractions += len(step.retracted)
            running_time += len(engine.running) * step.duration
        now = step.end
        for _ in step.finished:
            send(now)
    return Point(concurrency, tokens / MEASURE_S, retractions, running_time / MEASURE_S)


def summarize(points: list[Point]) -> dict[str, float]:
    """Where a curve saturates: the largest batch the KV cache holds, and the first level that retracts."""
    retracting = [p.concurrency for p in points if p.retractions]
    return {
        "max_running": max(p.mean_running for p in points),
        "first_retracting_concurrency": retracting[0] if retracting else float("nan"),
        "peak_tokens_per_s": max(p.output_tokens_per_s for p in points),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="write every point and the summary here")
    parser.add_argument("--output-lengths", metavar="SPEC", help="answers stop early: see the docstring")
    parser.add_argument("--max-new-tokens", type=int, default=OUTPUT_TOKENS, help="each request's limit")
    add_plot_arguments(parser, "batch.png, or batch-eos.png with --output-lengths, beside this file")
    args = parser.parse_args()
    try:
        lengths = parse_output_lengths(args.output_lengths) if args.output_lengths else None
    except OutputLengthsError as error:
        parser.error(str(error))
    if args.max_new_tokens < 1:
        parser.error(f"--max-new-tokens must be positive, got {args.max_new_tokens}")
    png = plot_destination(parser, args, HERE / ("batch-eos.png" if lengths else "batch.png"))
    curves: dict[str, list[Point]] = {}
    capacities = {dtype: plan(dtype) for dtype in ("bf16", "fp8_e4m3")}
    answers = f"answers {args.output_lengths} under " if lengths else ""
    workload = f"prompt {PROMPT_TOKENS} + {answers}max_new_tokens {args.max_new_tokens}"
    print(f"{workload}, {MEASURE_S:.0f} s measured per point")
    for dtype, capacity in capacities.items():
        print(f"\n{dtype}: {capacity.kv_tokens} KV tokens, {capacity.kv_bytes_per_token} B/token/GPU")
        print(f"{'concurrency':>11} {'tok/s':>8} {'running':>8} {'retractions':>11}")
        curves[dtype] = [run_closed_loop(capacity, c, lengths, args.max_new_tokens) for c in CONCURRENCY]
        for p in curves[dtype]:
            tokens_per_s, running = f"{p.output_tokens_per_s:>8.0f}", f"{p.mean_running:>8.1f}"
            print(f"{p.concurrency:>11} {tokens_per_s} {running} {p.retractions:>11}")
    bf16, fp8 = summarize(curves["bf16"]), summarize(curves["fp8_e4m3"])
    summary = {
        "bf16": bf16,
        "fp8_e4m3": fp8,
        "max_running_ratio": fp8["max_running"] / bf16["max_running"],
        "peak_throughput_ratio": fp8["peak_tokens_per_s"] / bf16["peak_tokens_per_s"],
    }
    print(
        f"\nlargest running batch: BF16 {bf16['max_running']:.1f}, FP8 {fp8['max_running']:.1f} "
        f"({summary['max_running_ratio']:.2f}x); first retractions at concurrency "
        f"{bf16['first_retracting_concurrency']} (BF16) and {fp8['first_retracting_concurrency']} (FP8)"
    )
    print(
        f"peak throughput: BF16 {bf16['peak_tokens_per_s']:.0f} tok/s, "
        f"FP8 {fp8['peak_tokens_per_s']:.0f} tok/s "
        f"({summary['peak_throughput_ratio']:.2f}x)"
    )
    if args.json:
        points = {d: [asdict(p) for p in ps] for d, ps in curves.items()}
        args.json.write_text(json.dumps({"points": points, "summary": summary}, indent=2))
    if png:
        title = f"Kimi-K2-shaped MLA, INT4 experts, TP8 H200: {workload}"
        print(f"plot: {batch_by_concurrency(curves, png, title)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
