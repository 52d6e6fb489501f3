"""Protection on realistic traffic: open-loop traces, four fronts, both KV dtypes, two SLOs.

Users arrive whether or not the service is slow, so the load is open-loop (`kvant_dev.trace_load`):
Poisson arrivals, prompts from a lognormal (median 1,000 tokens), every request asking for
`max_new_tokens` 4,096 and streaming; the simulated model stops each answer at its natural length,
a lognormal with median 300 tokens (`kvant sim --output-lengths lognormal:300,0.8`). Three traces:

- `lognormal`: that, with plain Poisson arrivals;
- `bursty`: the same, the arrival rate tripled for 2 s of every 10 s (the mean kept);
- `long-context`: bursty, and 10 % of prompts from a second lognormal with median 8,000 tokens.

Each runs at 1x, 2x and 4x of the BF16 cache, against a BF16 and an FP8 plan of the same simulated
GPU (`stack.plan_capacities`), behind four fronts: the gate in `off`, `worstCase` and `forecast`, and
`saturationDetector`, GIE's shedding rule (`saturation_detector.py`); and, on request (`--fronts`),
`forecast+deadline`: the gate in `forecast` with every client sending `X-Kvant-Deadline-Ms`, the
time it can wait and still meet the tight SLO: (1.5 - 1) x its no-queue latency (below). That needs
the answer's length, which a real client does not know but its latency budget in seconds it does;
here it is the simulator's own draw for the prompt (`natural_length`), checked against the answers
received. The gate refuses at once what cannot start within min(queueTimeoutSeconds, that budget).
Also on request, `forecast-2s`: forecast with the 2 s queue timeout the gate fronts had before
`run_cell` passed this bench's LIMITS (1 s) on. Every gate front gets `maxQueued` 8 and
`targetTokenUsage` 0.8 (`stack.LIMITS`) and `queueTimeoutSeconds` 1 (LIMITS below).

1x is the load the cache is sized for: the arrival rate whose requests, by Little's law, hold the
protection's target share of the BF16 cache (`targetTokenUsage`, 0.8) on average, at the time per
output token measured below.

A request is good if it completes within k x its no-queue latency, k = 1.5 (interactive) and 3
(lenient). No-queue latency = TTFT + output tokens x time per output token: the medians of a
calibration run at a tenth of 1x through `off` on the BF16 plan (so no queue, a batch of about
one), the time per token scaled by the cost model to the 1x batch (a step of 30 requests takes
longer than a step of one, and an SLO no engine at 1x could meet would measure nothing). Goodput =
output tokens of good requests per second of the measured window. Each cell replays `--warmup`
seconds of the trace unmeasured (the engine fills, the forecast learns), then `--seconds` measured;
requests that arrived in the window are waited for `--drain` seconds more, then cut (counted as not
good). Retractions are counted over the whole replay. The same seed gives every front the same
arrivals and the same prompts.

    python bench/protection/trace.py [--traces long-context,bursty,lognormal] [--seconds 15] [--json out.json]
        [--fronts off,worstCase,forecast,forecast-2s,forecast+deadline,saturationDetector] [--loads 1,2,4]
        [--kv bf16,fp8_e4m3]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from kvant_contracts.tenancy import DEADLINE_HEADER
from kvant_dev.loadgen import engine_retractions
from kvant_dev.tinymodel import make_tiny_checkpoint
from kvant_dev.trace_load import CUT, Arrival, Headers, Outcome, Trace, draw_prompt, prompt_text, replay_trace
from kvant_runtime.sim.cost import CostModel
from kvant_runtime.sim.output_lengths import parse_output_lengths

# Run by path, the bench has its own folder on sys.path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.plots import add_plot_arguments, goodput_by_load, plot_destination
from bench.protection.stack import DETECTOR, GATE_MODES, plan_capacities, serving_stack
from bench.protection.stack import LIMITS as GATE_LIMITS

HERE = Path(__file__).parent
MODES = [*GATE_MODES, DETECTOR]
DEADLINE = "forecast+deadline"
# Forecast with the 2 s queue timeout of `stack.LIMITS`: what this bench's gate fronts ran with before
# `run_cell` passed LIMITS on (issue #18's published numbers), kept to compare with them.
FORECAST_2S = "forecast-2s"
FRONTS = [*GATE_MODES, FORECAST_2S, DEADLINE, DETECTOR]
DEADLINE_SLO = 1.5  # the SLO whose slack the clients of `forecast+deadline` send as their deadline
SIM_SEED = 0  # `kvant sim --seed`'s default, which the simulator's answer lengths are drawn from
TARGET_TOKEN_USAGE = float(GATE_LIMITS["targetTokenUsage"])  # type: ignore[arg-type]
LOADS = (1, 2, 4)
SLOS = (1.5, 3.0)
OUTPUT_LENGTHS = "lognormal:300,0.8"
MAX_TOKENS = 4096
# A simulated GPU four times as fast as `kvant sim`'s default cost model, so that a 300-token answer
# takes about a second and a cell completes hundreds of requests in seconds; ratios are what count.
COST = CostModel(decode_base_s=0.0025, decode_per_request_s=0.000125, prefill_per_token_s=5e-6)
SIM_FLAGS = (
    *("--output-lengths", OUTPUT_LENGTHS, "--stream-interval", "16", "--context-length", "32768"),
    *("--decode-base-ms", str(COST.decode_base_s * 1e3)),
    *("--decode-per-request-ms", str(COST.decode_per_request_s * 1e3)),
    *("--prefill-per-token-us", str(COST.prefill_per_token_s * 1e6)),
)
# The runbook's advice: a queue wait past the interactive SLO's slack only makes an answer late.
LIMITS: dict[str, object] = {"queueTimeoutSeconds": 1}
BASE = Trace(rate=1.0, seconds=1.0, prompt_median=1000, prompt_sigma=0.6, max_tokens=MAX_TOKENS)
TRACES = {
    "lognormal": BASE,
    "bursty": replace(BASE, burst_factor=3.0),
    "long-context": replace(BASE, burst_factor=3.0, long_fraction=0.1, long_median=8000),
}


@dataclass(frozen=True)
class Load:
    """1x of a trace on the BF16 cache: the running batch whose KV fills the target share of it."""

    batch: float
    mean_output: float  # tokens per answer
    model_rate: float  # arrivals per second by the cost model's step time (sets the calibration load)

    def rate(self, reference: Reference) -> float:
        """Arrivals per second at 1x, by the time per output token actually measured."""
        return self.batch / (self.mean_output * reference.tpot + reference.ttft)


def one_x(trace: Trace, cache_tokens: int, draws: int = 20_000) -> Load:
    """The load the cache is sized for: by Little's law, requests that on average hold
    `targetTokenUsage` of the cache (the protection's own target, so 1x leaves the headroom an
    operator sizes for; bursts and the lognormal tail go above it)."""
    rng, lengths = random.Random(1), parse_output_lengths(OUTPUT_LENGTHS)
    pairs = [(draw_prompt(trace, rng), min(MAX_TOKENS, lengths.draw(rng))) for _ in range(draws)]
    outputs = sum(o for _, o in pairs)
    held_while_decoding = sum((p + o / 2) * o for p, o in pairs) / outputs  # token-time weighted
    batch = TARGET_TOKEN_USAGE * cache_tokens / held_while_decoding
    step = COST.decode_seconds(round(batch), cache_tokens)
    latency = outputs / draws * step + COST.prefill_seconds(sum(p for p, _ in pairs) // draws)
    return Load(batch, outputs / draws, batch / latency)


@dataclass(frozen=True)
class Reference:
    """A request's latency with no queue in its way: TTFT + output tokens x time per output token."""

    ttft: float
    tpot: float

    def slo(self, outcome: Outcome, factor: float) -> float:
        return factor * (self.ttft + outcome.output_tokens * self.tpot)


def calibrate(outcomes: list[Outcome], batch: float) -> Reference:
    """Medians measured alone (a tenth of 1x: no queue, a batch of about one), the time per output
    token scaled to the 1x batch by the cost model: a decode step of `batch` requests takes longer
    than one of a single request, and an SLO no 1x engine could meet would measure nothing."""
    done = [o for o in outcomes if o.status == 200 and o.ttft is not None and o.latency is not None]
    if len(done) < 5:
        raise SystemExit(f"calibration: only {len(done)} requests completed; the bench cannot set its SLOs")
    ttft = statistics.median(o.ttft for o in done if o.ttft is not None)
    per_token = [(o.latency - o.ttft) / (o.output_tokens - 1) for o in done if o.output_tokens > 1]  # type: ignore[operator]
    at_batch = COST.decode_seconds(round(batch), 0) / COST.decode_seconds(1, 0)
    return Reference(ttft, statistics.median(per_token) * at_batch)


def natural_length(text: str, max_tokens: int = MAX_TOKENS) -> int:
    """The answer length the simulator draws for `text` (kvant_runtime.sim: a generator seeded with
    its seed, the prompt's JSON and the limit), clipped at the limit: the bench's stand-in for a
    client that knows its latency budget. `deadline_check` says whether the simulator still agrees."""
    rng = random.Random(f"{SIM_SEED}/{json.dumps(text, sort_keys=True)}/{max_tokens}")
    return min(max_tokens, parse_output_lengths(OUTPUT_LENGTHS).draw(rng))


def deadline_headers(reference: Reference, max_tokens: int = MAX_TOKENS) -> Headers:
    """Each request's X-Kvant-Deadline-Ms: what it may wait and still complete within DEADLINE_SLO x
    its no-queue latency, i.e. (DEADLINE_SLO - 1) x that latency, sent as it arrives."""

    def headers(number: int, arrival: Arrival) -> dict[str, str]:
        output = natural_length(prompt_text(arrival, number), max_tokens)
        slack = (DEADLINE_SLO - 1) * (reference.ttft + output * reference.tpot)
        return {DEADLINE_HEADER: str(max(0, round(slack * 1e3)))}

    return headers


def deadline_check(outcomes: list[Outcome], max_tokens: int = MAX_TOKENS) -> float:
    """The share of completed answers as long as `natural_length` said (1.0: the deadlines were right)."""
    done = [(n, o) for n, o in enumerate(outcomes) if o.status == 200]
    same = sum(1 for n, o in done if o.output_tokens == natural_length(prompt_text(o.arrival, n), max_tokens))
    return same / len(done) if done else math.nan


def summarize(
    outcomes: list[Outcome], warmup: float, window: float, reference: Reference, retracted: float
) -> dict[str, Any]:
    measured = [o for o in outcomes if o.arrival.at >= warmup]
    arrived = len(measured) or 1
    ttfts = sorted(o.ttft for o in measured if o.ttft is not None)
    goodput = {
        str(k): sum(
            o.output_tokens
            for o in measured
            if o.status == 200 and o.latency is not None and o.latency <= reference.slo(o, k)
        )
        / window
        for k in SLOS
    }
    return {
        "goodput": goodput,
        "p99_ttft": ttfts[min(len(ttfts) - 1, math.ceil(0.99 * len(ttfts)) - 1)] if ttfts else None,
        # Over the whole replay, warm-up included: retractions are rare events, count them all.
        "retractions_per_1000": 1000 * retracted / max(1, len(outcomes)),
        "retractions": retracted,
        "rate429": sum(1 for o in measured if o.status == 429) / arrived,
        "completed": sum(1 for o in measured if o.status == 200),
        "cut": sum(1 for o in measured if o.status == CUT),
        "arrived": len(measured),
    }


def run_cell(
    workdir: Path,
    tokens: int,
    mode: str,
    trace: Trace,
    drain: float,
    *,
    limits: dict[str, object] | None = None,
    headers: Headers | None = None,
) -> tuple[list[Outcome], float]:
    with serving_stack(workdir, tokens, mode, SIM_FLAGS, LIMITS if limits is None else limits) as stack:
        outcomes = replay_trace(stack.front, trace, drain, headers)
        return outcomes, engine_retractions(stack.engine)


def run_front(
    workdir: Path, tokens: int, front: str, trace: Trace, drain: float, *, reference: Reference
) -> tuple[list[Outcome], float]:
    """One cell behind `front`: a gate mode or the detector, or one of forecast's variants."""
    if front == DEADLINE:
        return run_cell(workdir, tokens, "forecast", trace, drain, headers=deadline_headers(reference))
    if front == FORECAST_2S:
        limits = {**LIMITS, "queueTimeoutSeconds": GATE_LIMITS["queueTimeoutSeconds"]}
        return run_cell(workdir, tokens, "forecast", trace, drain, limits=limits)
    return run_cell(workdir, tokens, front, trace, drain)


def ratio(a: float, b: float) -> float:
    return a / b if b else math.inf


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--traces",
        default=",".join(reversed(TRACES)),  # the headline first: every feature at once
        help="comma-separated, of: " + ", ".join(TRACES),
    )
    parser.add_argument("--bf16-tokens", type=int, default=65536, help="KV capacity of the BF16 plan")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured window per cell")
    parser.add_argument("--warmup", type=float, default=6.0, help="unmeasured seconds before the window")
    parser.add_argument("--drain", type=float, default=15.0, help="wait this long after the last arrival")
    parser.add_argument("--fronts", default=",".join(MODES), help="comma-separated, of: " + ", ".join(FRONTS))
    parser.add_argument("--loads", default=",".join(map(str, LOADS)), help="x 1x, comma-separated")
    parser.add_argument("--kv", default="bf16,fp8_e4m3", help="KV dtypes, comma-separated: bf16, fp8_e4m3")
    parser.add_argument("--json", type=Path)
    add_plot_arguments(parser, "goodput-trace.png beside this file (the first trace)")
    args = parser.parse_args()
    names = args.traces.split(",")
    if unknown := [n for n in names if n not in TRACES]:
        parser.error(f"--traces: unknown {unknown}; known: {list(TRACES)}")
    fronts = args.fronts.split(",")
    if unknown := [f for f in fronts if f not in FRONTS]:
        parser.error(f"--fronts: unknown {unknown}; known: {FRONTS}")
    loads = [int(x) for x in args.loads.split(",")]
    dtypes = args.kv.split(",")
    png = plot_destination(parser, args, HERE / "goodput-trace.png")
    workdir = Path(tempfile.mkdtemp(prefix="kvant-bench-trace-"))
    make_tiny_checkpoint(workdir / "tiny")
    capacity = plan_capacities(workdir / "tiny", args.bf16_tokens)
    if unknown := [d for d in dtypes if d not in capacity]:
        parser.error(f"--kv: unknown {unknown}; known: {list(capacity)}")
    print(f"KV capacity: bf16 {capacity['bf16']} tokens, fp8 {capacity['fp8_e4m3']} tokens")
    print(f"answers {OUTPUT_LENGTHS} under max_new_tokens {MAX_TOKENS}; window {args.seconds:g} s")
    report: dict[str, Any] = {"capacity": capacity, "traces": {}}
    grid = Grid(fronts, loads, {d: capacity[d] for d in dtypes}, args.warmup, args.seconds, args.drain)
    for name in names:
        report["traces"][name] = run_trace(workdir, name, capacity["bf16"], grid)
    print()
    _print_goals(report, fronts)
    if DEADLINE in fronts and DETECTOR in fronts:
        _print_deadline_goal(report, fronts)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    if png:
        print(f"plot: {plot(report, names[0], png, fronts)}")


@dataclass(frozen=True)
class Grid:
    """The cells each trace runs: fronts x loads x KV plans, and each cell's timing."""

    fronts: list[str]
    loads: list[int]
    plans: dict[str, int]  # KV dtype -> its plan's KV tokens
    warmup: float
    seconds: float
    drain: float


def run_trace(workdir: Path, name: str, bf16_tokens: int, grid: Grid) -> dict[str, Any]:
    """One trace: its calibration, then every cell of the grid on the same arrivals."""
    shape = TRACES[name]
    load = one_x(shape, bf16_tokens)
    calm = replace(shape, rate=load.model_rate / 10, seconds=20.0)
    reference = calibrate(run_cell(workdir, bf16_tokens, "off", calm, grid.drain)[0], load.batch)
    rate = load.rate(reference)
    print(
        f"\n== trace {name}: 1x = {rate:.2f} requests/s (batch {load.batch:.1f}); no-queue TTFT "
        f"{reference.ttft * 1e3:.0f} ms, {reference.tpot * 1e3:.2f} ms per output token"
    )
    print(
        f"{'KV':9} {'load':>4} {'mode':18} {'good@1.5x':>9} {'good@3x':>8} {'p99 TTFT s':>10} "
        f"{'retr/1k':>7} {'429 rate':>8} {'done':>5} {'cut':>4}"
    )
    rows = []
    checks: list[float] = []
    for dtype, tokens in grid.plans.items():
        for factor in grid.loads:
            trace = replace(shape, rate=rate * factor, seconds=grid.warmup + grid.seconds)
            cells = {}
            for front in grid.fronts:
                outcomes, retracted = run_front(
                    workdir, tokens, front, trace, grid.drain, reference=reference
                )
                cells[front] = summarize(outcomes, grid.warmup, grid.seconds, reference, retracted)
                _print_cell(dtype, factor, front, cells[front])
                if front == DEADLINE:
                    checks.append(deadline_check(outcomes))
            rows.append({"kv": dtype, "load": factor, **cells})
    found: dict[str, Any] = {
        "oneX": {**asdict(load), "rate": rate},
        "reference": asdict(reference),
        "rows": rows,
    }
    if checks:
        # Were the deadlines the clients sent the right ones? Only if the simulator drew as predicted.
        found["deadline_lengths_right"] = min(checks)
        print(f"deadline clients: answer lengths as predicted in {min(checks):.1%} of answers (worst cell)")
    return found


def plot(report: dict[str, Any], name: str, png: Path, fronts: list[str]) -> Path:
    """Goodput against arrival rate for one trace: a panel per KV dtype and SLO, a line per front."""
    flat = [
        {
            **row,
            "kv": f"SLO {slo:g}x: {row['kv']}",
            **{m: {"goodput": row[m]["goodput"][str(slo)]} for m in fronts},
        }
        for slo in SLOS
        for row in report["traces"][name]["rows"]
    ]
    title = f"trace {name}: answers {OUTPUT_LENGTHS}, max_tokens {MAX_TOKENS}; SLO = k x no-queue latency"
    return goodput_by_load(flat, fronts, png, title, "arrival rate (x the BF16 cache)")


def _print_cell(dtype: str, factor: int, mode: str, cell: dict[str, Any]) -> None:
    ttft = f"{cell['p99_ttft']:.2f}" if cell["p99_ttft"] is not None else "-"
    print(
        f"{dtype:9} {factor:>3}x {mode:18} {cell['goodput']['1.5']:9.0f} {cell['goodput']['3.0']:8.0f} "
        f"{ttft:>10} {cell['retractions_per_1000']:7.1f} {cell['rate429']:8.2f} {cell['completed']:5d} "
        f"{cell['cut']:4d}"
    )


def _print_goals(report: dict[str, Any], fronts: list[str]) -> None:
    """Issue #18's goals, each as measured in this run: met or not met, with the worst cell."""
    if not {"off", "forecast", DETECTOR} <= set(fronts) or not {1, 2, 4} <= {
        row["load"] for trace in report["traces"].values() for row in trace["rows"]
    }:
        return  # a partial grid: issue #18's goals need every load and these fronts
    vs_off: list[tuple[float, str]] = []
    vs_detector: list[tuple[float, str]] = []
    at_load: dict[int, list[float]] = {1: [], 2: [], 4: []}
    retractions: list[tuple[float, str]] = []
    for name, trace in report["traces"].items():
        for row in trace["rows"]:
            where = f"{name} {row['kv']} {row['load']}x"
            retractions.append((row["forecast"]["retractions_per_1000"], where))
            for slo in map(str, SLOS):
                forecast = row["forecast"]["goodput"][slo]
                off = ratio(forecast, row["off"]["goodput"][slo])
                vs_off.append((off, f"{where} SLO {slo}"))
                if row["load"] == 1 or slo == "1.5":
                    at_load[row["load"]].append(off)
                if row["load"] > 1:
                    vs_detector.append((ratio(forecast, row[DETECTOR]["goodput"][slo]), f"{where} SLO {slo}"))
    goals = [
        (
            "forecast / off at 1x >= 0.97",
            min(at_load[1], default=math.nan) >= 0.97,
            min(at_load[1], default=0),
        ),
        (
            "forecast / off at 2x (SLO 1.5x) >= 1.5",
            min(at_load[2], default=0) >= 1.5,
            min(at_load[2], default=0),
        ),
        ("forecast / off at 4x (SLO 1.5x) >= 2", min(at_load[4], default=0) >= 2, min(at_load[4], default=0)),
        ("forecast / off never below 0.97", min(vs_off)[0] >= 0.97, min(vs_off)),
        ("forecast / detector >= 1.0 when overloaded", min(vs_detector)[0] >= 1.0, min(vs_detector)),
        ("forecast retractions <= 1 per 1,000", max(retractions)[0] <= 1.0, max(retractions)),
    ]
    for goal, met, worst in goals:
        print(f"goal: {goal}: {'met' if met else 'NOT met'} (worst: {worst})")


def _print_deadline_goal(report: dict[str, Any], fronts: list[str]) -> None:
    """Issue #31's goal: at the tight SLO, in every overloaded cell, forecast+deadline >= 1.0x the
    detector. Printed per cell, with plain forecast (and its 2 s variant) beside it."""
    variants = [f for f in ("forecast", FORECAST_2S, DEADLINE) if f in fronts]
    slo = str(DEADLINE_SLO)
    print(f"\nat the tight SLO ({DEADLINE_SLO:g}x), goodput and ratio to {DETECTOR}:")
    print(f"{'trace':13} {'KV':9} {'load':>4} {'detector':>8} " + " ".join(f"{v:>24}" for v in variants))
    worst: list[tuple[float, str]] = []
    for name, trace in report["traces"].items():
        for row in trace["rows"]:
            if row["load"] <= 1:
                continue
            detector = row[DETECTOR]["goodput"][slo]
            cells = [
                f"{row[v]['goodput'][slo]:8.0f} ({ratio(row[v]['goodput'][slo], detector):5.2f}x)"
                for v in variants
            ]
            print(
                f"{name:13} {row['kv']:9} {row['load']:>3}x {detector:8.0f} "
                + " ".join(f"{c:>24}" for c in cells)
            )
            where = f"{name} {row['kv']} {row['load']}x"
            worst.append((ratio(row[DEADLINE]["goodput"][slo], detector), where))
    if worst:
        low = min(worst)
        below = sum(1 for value, _ in worst if value < 1.0)
        verdict = (
            "met"
            if low[0] >= 1.0
            else f"NOT met in {below} of {len(worst)} cells, worst {low[0]:.2f} ({low[1]})"
        )
        print(f"goal: {DEADLINE} / detector >= 1.0 at SLO {DEADLINE_SLO:g}x when overloaded: {verdict}")


if __name__ == "__main__":
    main()
