"""Tenants on one protected cache: priorities, fair shares, and what tenancy buys (issue #31).

One replica, four tenants, each an open-loop trace (`kvant_dev.trace_load`) sent with its own API
key (`<key> tenant=<name>` in the gate's `--api-keys-file`); the limits document's `tenancy` gives
each tenant its class:

- `interactive` (critical): Poisson at 0.3x of its own 1x, short answers (max_new_tokens 128);
- `batch` (sheddable): a flood, Poisson at 4x;
- `std-a` and `std-b` (standard): 0.3x each; for the second phase std-b doubles its rate (a second
  0.3x stream under the same key, so std-b's arrivals stay Poisson, now at 0.6x).

A tenant's 1x is as in `trace.py`: the arrival rate whose requests, by Little's law, hold the
protection's target share (0.8) of the BF16 cache, for that tenant's own prompts and answer limit (so
0.3x of interactive's short answers holds as much of the cache as 0.3x of std-a's long ones). The
engine, its cost model, the prompts, the answers (`lognormal:300,0.8` under each limit), the SLOs
(k x no-queue latency, from the same calibration run at a tenth of 1x) and the gate's limits
(forecast admission, `maxQueued` 8, `queueTimeoutSeconds` 1) are `trace.py`'s.

Three runs on the same arrivals (the same seed per stream):
- `alone`: interactive's stream only, tenancy on: what interactive gets with the replica to itself;
- `tenancy`: every stream, tenancy on (the gate orders its queue by class, then fair share);
- `no tenancy`: every stream, no keys and no `tenancy`: one default tenant, FIFO, as before #31.

Each replays `--warmup` unmeasured seconds, then phase 1 and phase 2 (`--phase` seconds each); the
measured window is both phases; requests are waited for `--drain` seconds after the last arrival.
Measured: (a) interactive's goodput at the tight SLO (k = 1.5) with the flood running over its
goodput alone (goal: >= 0.9); (b) std-a's admitted tokens (prompt + output of requests the gate let
through) over std-b's in phase 2, while std-b sends twice as much (goal: >= 0.8, the smaller over
the larger); each tenant's refusals (429, by the gate's reason where its metrics name one) and the
engine's retractions. Each goal is printed met or not, and by how much.

`--engine real` runs the same three on the real SGLang (CPU, `bench/real_engine.py`, the tiny chat
model, `--kv-tokens` 4,096), scaled down to it: prompts of about 100 tokens, answers of at most 64
(16 for interactive) that stop where the model stops, the gate counting with the model's tokenizer and
with real_engine.py's queue (`maxQueued` 64, `queueTimeoutSeconds` 10). 1x is measured there, not
modelled (`on_real_engine`).

    python bench/protection/tenants.py [--phase 20] [--json out.json]
    python bench/protection/tenants.py --engine real --warmup 10 --phase 25 [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from kvant_contracts import prometheus_text
from kvant_dev.loadgen import engine_retractions
from kvant_dev.netutil import free_port, http_ok, wait_until
from kvant_dev.tinychat import ensure_tiny_chat_model
from kvant_dev.tinymodel import make_tiny_checkpoint
from kvant_dev.trace_load import CUT, Arrival, Outcome, Trace, arrivals, draw_prompt, replay
from kvant_runtime.sim.output_lengths import parse_output_lengths

# Run by path, the bench has its own folder on sys.path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.protection.real_engine import MAX_RUNNING, flush, split_cpus
from bench.protection.stack import plan_capacities, serving_front
from bench.protection.trace import (
    BASE,
    COST,
    LIMITS,
    OUTPUT_LENGTHS,
    SIM_FLAGS,
    TARGET_TOKEN_USAGE,
    Load,
    Reference,
    calibrate,
    one_x,
    ratio,
    run_cell,
)
from bench.real_engine import real_engine

HERE = Path(__file__).parent
TIGHT, LENIENT = 1.5, 3.0
INTERACTIVE_GOAL = 0.9  # interactive's goodput with the flood, over alone
FAIRNESS_GOAL = 0.8  # the smaller standard tenant's admitted tokens over the larger's, in phase 2
PRIORITY = {"interactive": "critical", "std-a": "standard", "std-b": "standard", "batch": "sheddable"}
SHORT_ANSWERS = 128  # interactive's max_new_tokens


@dataclass(frozen=True)
class Stream:
    """One tenant's open-loop arrivals: `factor` x the tenant's 1x, from `start` to the run's end."""

    name: str  # the stream's own name; std-b has two
    tenant: str
    factor: float
    max_tokens: int
    seed: int
    start: float = 0.0  # seconds after the run's start


@dataclass(frozen=True)
class Plan:
    """The run's timeline: `warmup` unmeasured, then two phases; std-b doubles at the second."""

    warmup: float
    phase: float
    drain: float

    @property
    def doubling(self) -> float:
        return self.warmup + self.phase

    @property
    def end(self) -> float:
        return self.warmup + 2 * self.phase


def streams(plan: Plan, loads: Loads, long: int, short: int) -> list[Stream]:
    """The four tenants' streams, answers limited to `long` tokens (`short` for interactive)."""
    return [
        Stream("interactive", "interactive", loads.interactive, short, seed=11),
        Stream("batch", "batch", loads.batch, long, seed=12),
        Stream("std-a", "std-a", loads.standard, long, seed=13),
        Stream("std-b", "std-b", loads.standard, long, seed=14),
        # The doubling: a second stream of std-b's from phase 2 on, under the same key.
        Stream("std-b+", "std-b", loads.standard, long, seed=15, start=plan.doubling),
    ]


@dataclass(frozen=True)
class Loads:
    """Each tenant's load, x its own 1x."""

    interactive: float
    batch: float
    standard: float  # std-a's, and std-b's before it doubles


def load_of(max_tokens: int, cache_tokens: int, draws: int = 20_000) -> Load:
    """`trace.one_x` for answers clipped at `max_tokens` (interactive's short ones): the running
    batch whose KV, by Little's law, holds the target share of the cache."""
    rng, lengths = random.Random(1), parse_output_lengths(OUTPUT_LENGTHS)
    pairs = [(draw_prompt(BASE, rng), min(max_tokens, lengths.draw(rng))) for _ in range(draws)]
    outputs = sum(o for _, o in pairs)
    held_while_decoding = sum((p + o / 2) * o for p, o in pairs) / outputs
    batch = TARGET_TOKEN_USAGE * cache_tokens / held_while_decoding
    step = COST.decode_seconds(round(batch), cache_tokens)
    latency = outputs / draws * step + COST.prefill_seconds(sum(p for p, _ in pairs) // draws)
    return Load(batch, outputs / draws, batch / latency)


def tenancy_limits(base: Mapping[str, object]) -> dict[str, object]:
    tenants = [{"name": name, "priority": priority} for name, priority in PRIORITY.items()]
    return {**base, "tenancy": {"defaultPriority": "standard", "tenants": tenants}}


def api_key(tenant: str) -> str:
    return f"bench-key-{tenant}"


@contextlib.contextmanager
def simulator(kv_tokens: int) -> Iterator[str]:
    """`kvant sim` as `stack.serving_stack` starts it (trace.py's flags), without a front: the front
    here needs the keys file, which `serving_stack` does not pass."""
    port = free_port()
    command = [sys.executable, "-m", "kvant_cli.main", "sim", "--port", str(port), "--model-name", "bench"]
    command += ["--kv-tokens", str(kv_tokens), "--max-running-requests", str(max(1, kv_tokens // 256))]
    process = subprocess.Popen([*command, *SIM_FLAGS], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/health"), 60, "the simulator")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Sent:
    """One request of a run: whose it was and when it arrived, in the run's own clock."""

    stream: str
    tenant: str
    at: float
    outcome: Outcome


async def _replay_streams(
    front: str, traces: list[tuple[Stream, Trace]], drain: float, keys: bool
) -> list[Sent]:
    """Every stream at once, each from its start; all end (and are cut) at the same moment."""

    async def one(stream: Stream, trace: Trace) -> list[Sent]:
        if not arrivals(trace):
            return []  # a slow stream may draw no arrival in a short run; replay needs one
        await asyncio.sleep(stream.start)
        token = {"Authorization": f"Bearer {api_key(stream.tenant)}"} if keys else {}

        def headers(_number: int, _arrival: Arrival) -> Mapping[str, str]:
            return token

        outcomes = await replay(front, trace, drain, headers)
        return [Sent(stream.name, stream.tenant, stream.start + o.arrival.at, o) for o in outcomes]

    done = await asyncio.gather(*(one(stream, trace) for stream, trace in traces))
    return [sent for stream in done for sent in stream]


@dataclass(frozen=True)
class Backend:
    """Where the runs go: a fresh simulator per run, or the one real engine, flushed between runs."""

    engine: Callable[[], contextlib.AbstractContextManager[str]]
    gate_flags: tuple[str, ...]
    limits: dict[str, object]  # the gate's limits, tenancy aside


def run_tenants(
    backend: Backend,
    workdir: Path,
    traces: list[tuple[Stream, Trace]],
    plan: Plan,
    *,
    tenancy: bool,
    mode: str = "forecast",
) -> tuple[list[Sent], float, dict[str, dict[str, float]]]:
    """One run behind the gate: what each request got, the engine's retractions during it, and the
    gate's refusals by tenant and reason (empty where its metrics do not split them)."""
    flags = list(backend.gate_flags)
    if tenancy:
        keys = workdir / "api-keys"
        keys.write_text("".join(f"{api_key(t)} tenant={t}\n" for t in PRIORITY))
        flags += ["--api-keys-file", str(keys)]
    limits = tenancy_limits(backend.limits) if tenancy else dict(backend.limits)
    with backend.engine() as engine, serving_front(workdir, engine, mode, limits, flags) as stack:
        before = engine_retractions(engine)
        sent = asyncio.run(_replay_streams(stack.front, traces, plan.drain, tenancy))
        refusals = gate_refusals(stack.front)
        return sent, engine_retractions(engine) - before, refusals


def gate_refusals(front: str) -> dict[str, dict[str, float]]:
    """tenant -> reason -> requests the gate refused, from its own metrics: every counter with both a
    `reason` and a `tenant` label whose name says rejected or refused."""
    with urllib.request.urlopen(f"{front}/gate/metrics", timeout=5) as response:
        text = response.read().decode()
    found: dict[str, dict[str, float]] = {}
    for sample in prometheus_text.samples(text):
        if not any(word in sample.name for word in ("reject", "refus")):
            continue
        if sample.name.endswith("_total") and {"reason", "tenant"} <= sample.labels.keys():
            by_reason = found.setdefault(sample.labels["tenant"], {})
            reason = sample.labels["reason"]
            by_reason[reason] = by_reason.get(reason, 0.0) + sample.value
    return found


def summarize(sent: list[Sent], plan: Plan, reference: Reference) -> dict[str, Any]:
    """Per tenant, over the measured window (arrivals from the end of the warm-up on)."""
    window = plan.end - plan.warmup
    report: dict[str, Any] = {}
    for tenant in PRIORITY:
        mine = [s for s in sent if s.tenant == tenant and s.at >= plan.warmup]
        if not mine:
            continue
        outcomes = [s.outcome for s in mine]
        ttfts = sorted(o.ttft for o in outcomes if o.ttft is not None)
        report[tenant] = {
            "arrived": len(mine),
            "completed": sum(1 for o in outcomes if o.status == 200),
            "refused": sum(1 for o in outcomes if o.status == 429),
            "cut": sum(1 for o in outcomes if o.status == CUT),
            "goodput": {str(k): _good_tokens(outcomes, reference, k) / window for k in (TIGHT, LENIENT)},
            # At the tight SLO, per phase: did std-b's doubling (more standard work) cost this tenant?
            "goodput_by_phase": {
                "phase1": _good_tokens([s.outcome for s in mine if s.at < plan.doubling], reference, TIGHT)
                / plan.phase,
                "phase2": _good_tokens([s.outcome for s in mine if s.at >= plan.doubling], reference, TIGHT)
                / plan.phase,
            },
            "p99_ttft": ttfts[min(len(ttfts) - 1, math.ceil(0.99 * len(ttfts)) - 1)] if ttfts else None,
            # Admitted: the gate let it through (it got a first token); its prompt and what it generated.
            "admitted_tokens": {
                "phase1": _admitted([s for s in mine if s.at < plan.doubling]),
                "phase2": _admitted([s for s in mine if s.at >= plan.doubling]),
            },
        }
    return report


def _good_tokens(outcomes: list[Outcome], reference: Reference, k: float) -> int:
    return sum(
        o.output_tokens
        for o in outcomes
        if o.status == 200 and o.latency is not None and o.latency <= reference.slo(o, k)
    )


def _admitted(sent: list[Sent]) -> int:
    return sum(
        s.outcome.arrival.prompt_tokens + s.outcome.output_tokens for s in sent if s.outcome.ttft is not None
    )


def fairness(tenants: Mapping[str, Any], phase: str) -> float:
    """The smaller standard tenant's admitted tokens over the larger's: 1 is an even split."""
    a, b = (tenants[t]["admitted_tokens"][phase] for t in ("std-a", "std-b"))
    return min(a, b) / max(a, b) if max(a, b) else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engine", choices=["sim", "real"], default="sim", help="kvant sim or real SGLang")
    parser.add_argument("--bf16-tokens", type=int, default=65536, help="KV capacity of the BF16 plan (sim)")
    parser.add_argument("--kv-tokens", type=int, default=4096, help="the real engine's --max-total-tokens")
    parser.add_argument("--warmup", type=float, default=6.0, help="unmeasured seconds before phase 1")
    parser.add_argument("--phase", type=float, default=20.0, help="seconds of each phase")
    parser.add_argument("--drain", type=float, default=15.0, help="wait this long after the last arrival")
    parser.add_argument("--interactive", type=float, default=0.3, help="interactive's load (x its 1x)")
    parser.add_argument("--batch", type=float, default=4.0, help="batch's load (x its 1x)")
    parser.add_argument("--standard", type=float, default=0.3, help="std-a's and std-b's (phase 1) load")
    parser.add_argument(
        "--engine-args",
        default="",
        help="more SGLang flags for --engine real, as spec.serving.engineArgs passes them (e.g. "
        "'--enable-priority-scheduling --default-priority-value=1')",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    plan = Plan(args.warmup, args.phase, args.drain)
    loads = Loads(args.interactive, args.batch, args.standard)
    workdir = Path(tempfile.mkdtemp(prefix="kvant-bench-tenants-"))
    if args.engine == "sim":
        report = on_simulator(workdir, args.bf16_tokens, plan, loads)
    else:
        # SIGTERM (a timeout) unwinds, so the real engine's process group is stopped.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        report = on_real_engine(workdir, args.kv_tokens, plan, loads, tuple(shlex.split(args.engine_args)))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


def on_simulator(workdir: Path, bf16_tokens: int, plan: Plan, loads: Loads) -> dict[str, Any]:
    make_tiny_checkpoint(workdir / "tiny")
    tokens = plan_capacities(workdir / "tiny", bf16_tokens)["bf16"]
    base = one_x(BASE, tokens)
    calm = replace(BASE, rate=base.model_rate / 10, seconds=20.0)
    reference = calibrate(run_cell(workdir, tokens, "off", calm, plan.drain)[0], base.batch)
    print(
        f"KV {tokens} tokens (BF16 plan); no-queue TTFT {reference.ttft * 1e3:.0f} ms, "
        f"{reference.tpot * 1e3:.2f} ms per output token at the 1x batch; window {2 * plan.phase:g} s"
    )
    rates = {limit: load_of(limit, tokens).rate(reference) for limit in (BASE.max_tokens, SHORT_ANSWERS)}
    backend = Backend(lambda: simulator(tokens), (), dict(LIMITS))
    chosen = streams(plan, loads, BASE.max_tokens, SHORT_ANSWERS)
    found = compare(backend, workdir, plan, chosen=chosen, shape=BASE, rates=rates, reference=reference)
    return {"engine": "sim", "kv_tokens": tokens, **found}


def compare(
    backend: Backend,
    workdir: Path,
    plan: Plan,
    *,
    chosen: list[Stream],
    shape: Trace,
    rates: Mapping[int, float],
    reference: Reference,
) -> dict[str, Any]:
    """The three runs (alone, tenancy, no tenancy) on the same arrivals; `rates`: 1x by answer limit."""
    traces = []
    for stream in chosen:
        rate = stream.factor * rates[stream.max_tokens]
        seconds = plan.end - stream.start
        traces.append(
            (
                stream,
                replace(shape, rate=rate, seconds=seconds, max_tokens=stream.max_tokens, seed=stream.seed),
            )
        )
        print(f"  {stream.name:12} {PRIORITY[stream.tenant]:9} {stream.factor:g}x = {rate:.2f} requests/s")
    runs = {
        "alone": ([t for t in traces if t[0].tenant == "interactive"], True),
        "tenancy": (traces, True),
        "no tenancy": (traces, False),
    }
    report: dict[str, Any] = {"plan": asdict(plan), "reference": asdict(reference)}
    report["streams"] = [{**asdict(s), "rate": t.rate} for s, t in traces]
    report["runs"] = {}
    for name, (these, tenancy) in runs.items():
        sent, retracted, refusals = run_tenants(backend, workdir, these, plan, tenancy=tenancy)
        report["runs"][name] = {
            "tenants": summarize(sent, plan, reference),
            "retractions": retracted,
            "refusals_by_reason": refusals,
        }
        print_run(name, report["runs"][name])
    report["goals"] = goals(report["runs"])
    print_goals(report["goals"])
    return report


# The real engine's scale: its cache is 4,096 tokens, so prompts of about 100 of the tiny chat model's
# tokens (a prompt of x's is 2 characters a token to it; trace_load writes 4 per counted token) and
# answers of at most 64 tokens (16 for interactive); the model stops where it stops.
REAL_SHAPE = replace(BASE, prompt_median=50.0, max_tokens=64)
REAL_SHORT = 16
# The real engine's gate limits, as real_engine.py's: a CPU engine's answers take seconds.
REAL_LIMITS: dict[str, object] = {**LIMITS, "maxQueued": 64, "queueTimeoutSeconds": 10}
FLOOD_RATE = 20.0  # requests per second of each answer limit in the calibration flood: far past 1x


def on_real_engine(
    workdir: Path, kv_tokens: int, plan: Plan, loads: Loads, engine_args: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The same three runs on the real SGLang (CPU). There is no cost model to set 1x by, so it is
    measured: a flood through the forecast gate (both answer limits at once, far past what the engine
    serves) gives the output tokens per second the engine sustains and the time per output token at
    that batch; a tenant's 1x is that throughput over its mean answer in the flood (a CPU engine is
    bound by decode compute, not by its cache). The no-queue TTFT is the median of a calm run."""
    model = ensure_tiny_chat_model()
    engine_cpus = split_cpus()
    with real_engine(
        model, kv_tokens, workdir, MAX_RUNNING, cpus=engine_cpus, engine_args=engine_args
    ) as url:

        @contextlib.contextmanager
        def flushed() -> Iterator[str]:
            flush(url)
            yield url

        backend = Backend(flushed, ("--tokenizer", str(model)), REAL_LIMITS)
        calm = Stream("calm", "std-a", 1.0, REAL_SHAPE.max_tokens, seed=21)
        calm_run = Plan(0.0, 7.5, 30.0)
        sent, _, _ = run_tenants(
            backend,
            workdir,
            [(calm, replace(REAL_SHAPE, rate=0.5, seconds=15.0, seed=21))],
            calm_run,
            tenancy=False,
            mode="off",
        )
        ttfts = [s.outcome.ttft for s in sent if s.outcome.status == 200 and s.outcome.ttft is not None]
        flood_plan = Plan(5.0, 10.0, 30.0)
        flood = [
            (
                Stream(f"flood-{limit}", "std-a", 1.0, limit, seed=22 + i),
                replace(REAL_SHAPE, rate=FLOOD_RATE, seconds=flood_plan.end, max_tokens=limit, seed=22 + i),
            )
            for i, limit in enumerate((REAL_SHAPE.max_tokens, REAL_SHORT))
        ]
        sent, _, _ = run_tenants(backend, workdir, flood, flood_plan, tenancy=False)
        measured = [s for s in sent if s.at >= flood_plan.warmup and s.outcome.status == 200]
        if len(ttfts) < 5 or len(measured) < 10:
            raise SystemExit(f"real engine calibration: {len(ttfts)} calm and {len(measured)} flood answers")
        throughput = sum(s.outcome.output_tokens for s in measured) / (flood_plan.end - flood_plan.warmup)
        per_token = [
            (s.outcome.latency - s.outcome.ttft) / (s.outcome.output_tokens - 1)
            for s in measured
            if s.outcome.latency is not None and s.outcome.ttft is not None and s.outcome.output_tokens > 1
        ]
        reference = Reference(statistics.median(ttfts), statistics.median(per_token))
        mean_output = {}
        for stream, _ in flood:
            answers = [s.outcome.output_tokens for s in measured if s.stream == stream.name]
            mean_output[stream.max_tokens] = statistics.mean(answers) if answers else float(stream.max_tokens)
        rates = {limit: throughput / mean for limit, mean in mean_output.items()}
        print(
            f"real engine on CPUs {sorted(engine_cpus or [])}, KV {kv_tokens} tokens: sustains "
            f"{throughput:.0f} output tokens/s; no-queue TTFT {reference.ttft * 1e3:.0f} ms, "
            f"{reference.tpot * 1e3:.1f} ms per output token at that batch; mean answer {mean_output}"
        )
        chosen = streams(plan, loads, REAL_SHAPE.max_tokens, REAL_SHORT)
        found = compare(
            backend, workdir, plan, chosen=chosen, shape=REAL_SHAPE, rates=rates, reference=reference
        )
    return {
        "engine": "real",
        "kv_tokens": kv_tokens,
        "engine_args": list(engine_args),
        "throughput": throughput,
        "mean_output": mean_output,
        **found,
    }


def print_run(name: str, run: Mapping[str, Any]) -> None:
    print(f"\n== {name} (retractions: {run['retractions']:.0f})")
    print(
        f"{'tenant':12} {'class':9} {'arrived':>7} {'done':>5} {'429':>5} {'cut':>4} {'good@1.5':>8} "
        f"{'good@3':>7} {'p99 TTFT':>8} {'admitted ph1':>12} {'ph2':>8}  gate's refusals (whole run)"
    )
    for tenant, row in run["tenants"].items():
        ttft = f"{row['p99_ttft']:.2f}" if row["p99_ttft"] is not None else "-"
        reasons = run["refusals_by_reason"].get(tenant, {})
        why = ", ".join(f"{reason} {count:.0f}" for reason, count in sorted(reasons.items()) if count)
        print(
            f"{tenant:12} {PRIORITY[tenant]:9} {row['arrived']:7d} {row['completed']:5d} {row['refused']:5d} "
            f"{row['cut']:4d} {row['goodput']['1.5']:8.0f} {row['goodput']['3.0']:7.0f} {ttft:>8} "
            f"{row['admitted_tokens']['phase1']:12d} {row['admitted_tokens']['phase2']:8d}  {why or '-'}"
        )
    for tenant, reasons in run["refusals_by_reason"].items():
        if tenant not in run["tenants"]:  # without tenancy: everyone is the default tenant
            why = ", ".join(f"{reason} {count:.0f}" for reason, count in sorted(reasons.items()) if count)
            print(f"  the gate's refusals of tenant {tenant!r} (whole run): {why or '-'}")


def goals(runs: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Each goal's ratio with tenancy and without, against its threshold."""
    alone = runs["alone"]["tenants"]["interactive"]
    found: dict[str, dict[str, float]] = {}
    for name in ("tenancy", "no tenancy"):
        tenants = runs[name]["tenants"]
        interactive = tenants["interactive"]
        found[name] = {
            "interactive_vs_alone": ratio(interactive["goodput"]["1.5"], alone["goodput"]["1.5"]),
            **{
                f"interactive_vs_alone_{phase}": ratio(
                    interactive["goodput_by_phase"][phase], alone["goodput_by_phase"][phase]
                )
                for phase in ("phase1", "phase2")
            },
            "std_fairness_phase1": fairness(tenants, "phase1"),
            "std_fairness_phase2": fairness(tenants, "phase2"),
            # Did std-b's doubling cost std-a? Its admitted tokens in phase 2 over phase 1.
            "std_a_kept": ratio(
                tenants["std-a"]["admitted_tokens"]["phase2"], tenants["std-a"]["admitted_tokens"]["phase1"]
            ),
            "retractions": runs[name]["retractions"],
        }
    return found


def print_goals(found: Mapping[str, Mapping[str, float]]) -> None:
    print(f"\n{'':44} {'tenancy':>9} {'no tenancy':>11}")
    rows = [
        ("interactive goodput @1.5x, flood ÷ alone", "interactive_vs_alone"),
        ("  the same in phase 1", "interactive_vs_alone_phase1"),
        ("  the same in phase 2 (std-b doubled)", "interactive_vs_alone_phase2"),
        ("std-a vs std-b admitted, smaller ÷ larger, ph 1", "std_fairness_phase1"),
        ("std-a vs std-b admitted, smaller ÷ larger, ph 2", "std_fairness_phase2"),
        ("std-a admitted tokens, phase 2 ÷ phase 1", "std_a_kept"),
        ("retractions", "retractions"),
    ]
    for label, key in rows:
        print(f"{label:44} {found['tenancy'][key]:9.2f} {found['no tenancy'][key]:11.2f}")
    for label, key, goal in (
        ("interactive goodput with the flood ÷ alone", "interactive_vs_alone", INTERACTIVE_GOAL),
        ("std-a ÷ std-b admitted tokens while std-b doubles", "std_fairness_phase2", FAIRNESS_GOAL),
    ):
        value = found["tenancy"][key]
        verdict = "met" if value >= goal else f"NOT met, short by {goal - value:.2f}"
        print(
            f"goal: {label} >= {goal:g}: {value:.2f}, {verdict} (no tenancy: {found['no tenancy'][key]:.2f})"
        )


if __name__ == "__main__":
    main()
