"""Protection on the real SGLang engine under open-loop arrivals: does the gate pay for itself?

The engine is SGLang 0.5.23 itself (CPU backend, the local cluster's engine image, `bench/real_engine.py`)
serving the tiny trained chat model with the workload's `--max-total-tokens` KV tokens, alone on the
last CPU; the clients and the front run on the others (`real_engine.split_cpus`).

Method, fixed before any run:
- **Workloads** (`--workload`, `WORKLOADS`). Every answer runs to exactly its length (SGLang's
  `min_new_tokens`, not `ignore_eos`, with which SGLang would reserve each request's whole limit and
  never retract), so the unprotected engine retracts at SGLang's default conservativeness.
  - `short` (the default): prose prompts of about 45 tokens, answers of 256, a 4,096-token cache:
    long answers fill the cache.
  - `long-prompts`: prompts of 1,000-3,000 tokens (drawn once, seeded; each starts with its request's
    number, so no two share a cached prefix), answers of 512, an 8,192-token cache: three or four
    requests fill it, and a retraction throws away a prefill of thousands of tokens. The tiny model
    was trained to 2,048 positions; SGLang is told a 4,096-token context
    (`SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`), which costs the answers' quality, not the
    engine's memory or time per token, and quality is not measured here.
- **Arrivals.** Open loop, Poisson, seeded by the repetition: every front of a cell gets the same
  schedule (`kvant_dev.open_loop`). 1x is the engine's measured capacity: the requests per second it
  completes when kept full through no front (closed-loop clients, `capacity()`), measured once per run.
- **SLO.** `SLO`: time to first token and time per output token. Clients send the TTFT budget as the
  gate's deadline header, as a client with an SLO would; an engine alone ignores it.
- **Fronts.** `off` (the gate only proxies) and the product's defaults (`engine` admission, every limit
  at its default); `--fronts` adds `worstCase` and `forecast`, also at defaults.
- **Repetitions.** `--runs` (3) per cell, median and range. Each cell records the 1-minute load average
  at its end; a cell ending above `LOAD_LIMIT` (the bench itself keeps about two runnable: the engine and
  the clients) is marked `noisy` and left out of the medians.
- **Sampled.** Every `SAMPLE_SECONDS`: the engine's running and waiting requests and token usage
  (`/v1/loads`), its retraction counter, and the gate's effective concurrency and queue.

    python bench/protection/open_loop.py [--workload short|long-prompts] [--runs 3] [--seconds 40]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from kvant_contracts import prometheus_text
from kvant_dev.loadgen import LoadShape, engine_retractions, generate_load
from kvant_dev.open_loop import OpenLoopShape, Slo, run_open_loop
from kvant_dev.tinychat import ensure_tiny_chat_model
from kvant_runtime.gate.engine_load import fetch_loads
from kvant_runtime.prompt_counter import ModelTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.protection.real_engine import PROSE, flush, split_cpus
from bench.protection.stack import serving_front
from bench.real_engine import real_engine

SLO = Slo(ttft_seconds=4.0, tpot_seconds=0.15)
LOADS = (1, 2, 4)
FRONTS = ("off", "engine")
MAX_RUNNING = 64
LOAD_LIMIT = 3.0
SAMPLE_SECONDS = 0.5
CAPACITY_SECONDS = 30.0


@dataclass(frozen=True)
class Workload:
    new_tokens: int  # every answer's exact length
    kv_tokens: int  # the engine's cache (--max-total-tokens), unless --kv-tokens says otherwise
    prompt_tokens: tuple[int, int]  # the range prompts are drawn from (short: the prose as it is)
    engine_args: tuple[str, ...] = ()
    engine_env: tuple[tuple[str, str], ...] = ()

    def texts(self, model: Path) -> tuple[str, ...]:
        if self.prompt_tokens == SHORT_PROMPT:
            return PROSE
        return long_texts(ModelTokenizer(model), self.prompt_tokens)


SHORT_PROMPT = (45, 45)
LONG_PROMPT_TEXTS = 24  # distinct long prompts; request N sends text N % 24 after its own number
WORKLOADS = {
    "short": Workload(new_tokens=256, kv_tokens=4096, prompt_tokens=SHORT_PROMPT),
    "long-prompts": Workload(
        new_tokens=512,
        kv_tokens=8192,
        prompt_tokens=(1000, 3000),
        engine_args=("--context-length", "4096"),
        engine_env=(("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1"),),
    ),
}


def long_texts(tokenizer: ModelTokenizer, lengths: tuple[int, int]) -> tuple[str, ...]:
    """`LONG_PROMPT_TEXTS` prompts of prose sentences, each as long as a length drawn (seeded) from
    the range, counted by the model's own tokenizer."""
    rng = random.Random(0)
    texts = []
    for _ in range(LONG_PROMPT_TEXTS):
        target, sentences = rng.randint(*lengths), list[str]()
        while tokenizer.text(" ".join(sentences)) < target:
            sentences.append(rng.choice(PROSE))
        texts.append(" ".join(sentences))
    return tuple(texts)


def capacity(engine: str, kv_tokens: int, workload: Workload, texts: tuple[str, ...]) -> float:
    """Requests a second the engine completes kept full: closed-loop clients for twice what fills its
    cache, straight to the engine."""
    prompt = sum(workload.prompt_tokens) // 2
    clients = max(2, 2 * kv_tokens // (prompt + workload.new_tokens))
    shape = LoadShape(
        clients,
        CAPACITY_SECONDS,
        prompt,
        workload.new_tokens,
        1e9,
        texts=texts,
        run_to_limit=True,
        drain_seconds=60,
    )
    flush(engine)
    result = generate_load(engine, shape)
    return result.completed / CAPACITY_SECONDS


async def _sample(
    session: aiohttp.ClientSession, engine: str, front: str, into: list[dict[str, float]]
) -> None:
    start = time.monotonic()
    while True:
        row: dict[str, float] = {"t": round(time.monotonic() - start, 2)}
        try:
            load = await fetch_loads(session, engine, 2.0, time.monotonic())
            row.update(
                running=load.running, waiting=load.waiting, usage=round(load.used_tokens / load.capacity, 3)
            )
            async with session.get(f"{front}/gate/metrics") as response:
                page = await response.text()
            for key, name in (
                ("concurrency", "kvant_gate_effective_concurrency"),
                ("gate_queue", "kvant_gate_queue_length"),
            ):
                if (found := prometheus_text.value(page, name)) is not None:
                    row[key] = found
        except Exception as err:  # a sample missed is a gap in the series, not a failed cell
            row["error"] = str(err)[:80]  # type: ignore[assignment]
        into.append(row)
        await asyncio.sleep(SAMPLE_SECONDS)


async def _measured(
    front: str, engine: str, shape: OpenLoopShape
) -> tuple[dict[str, Any], list[dict[str, float]]]:
    samples: list[dict[str, float]] = []
    async with aiohttp.ClientSession() as session:
        sampler = asyncio.create_task(_sample(session, engine, front, samples))
        result = await run_open_loop(front, shape)
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    return result.summary(), samples


def cell(
    workdir: Path,
    engine: str,
    model: Path,
    front: str,
    *,
    rate: float,
    run: int,
    seconds: float,
    new_tokens: int,
    texts: tuple[str, ...],
) -> dict[str, Any]:
    flush(engine)
    shape = OpenLoopShape(rate, seconds, new_tokens, texts, SLO, seed=run)
    flags = ["--tokenizer", str(model)]
    with serving_front(workdir, engine, front, gate_flags=flags, base={}) as stack:
        before = engine_retractions(engine)
        summary, samples = asyncio.run(_measured(stack.front, engine, shape))
        retractions = engine_retractions(engine) - before
        summary["refusals_by_reason"] = _refusals(stack.front)
    summary["retractions"] = int(retractions)
    completed = summary["statuses"].get("200", 0)
    summary["retractions_per_1000"] = round(1000 * retractions / completed, 1) if completed else None
    summary["load_average"] = round(os.getloadavg()[0], 2)
    summary["noisy"] = summary["load_average"] > LOAD_LIMIT
    summary.update(sampled_means(samples))
    summary["samples"] = samples
    return summary


def sampled_means(samples: list[dict[str, float]]) -> dict[str, float | None]:
    """The engine's mean running batch and cache usage over the cell: how full the front kept it."""
    read = [row for row in samples if "running" in row]
    if not read:
        return {"mean_running": None, "mean_kv_usage": None}
    return {
        "mean_running": round(statistics.fmean(row["running"] for row in read), 1),
        "mean_kv_usage": round(statistics.fmean(row["usage"] for row in read), 3),
    }


def _refusals(front: str) -> dict[str, int]:
    """The gate's own refusals by reason (`deadline` at arrival, `queue_timeout` after waiting, ...)."""
    with urllib.request.urlopen(f"{front}/gate/metrics", timeout=10) as page:
        return {
            sample.labels["reason"]: int(sample.value)
            for sample in prometheus_text.samples(page.read().decode(), "kvant_gate_rejected_total")
            if sample.value
        }


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    found = [r[key] for r in runs if r[key] is not None]
    return statistics.median(found) if found else None


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})" if values else "-"


def medians(
    cells: dict[str, list[dict[str, Any]]], loads: tuple[int, ...], fronts: tuple[str, ...]
) -> list[str]:
    """The table: per front and load, the median over the quiet runs and the range of goodput ÷ off
    (each run against off's run of the same schedule)."""
    rows = [
        "| front | load | goodput ÷ off, median (range) | goodput tok/s | good / sent | 429 | refusal p99 ms "
        "| retractions per 1,000 | TTFT p50 s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for front in fronts:
        for load in loads:
            runs = [c for c in cells[f"{front}@{load}x"] if not c["noisy"]]
            if not runs:
                rows.append(f"| {front} | {load}x | every run noisy | | | | | | |")
                continue
            offs = cells.get(f"off@{load}x", [])
            ratios = [
                r["goodput"] / o["goodput"]
                for r, o in zip(cells[f"{front}@{load}x"], offs, strict=False)
                if o["goodput"] and not r["noisy"] and not o["noisy"]
            ]
            refused = statistics.median(int(r["statuses"].get("429", 0)) for r in runs)
            rows.append(
                f"| {front} | {load}x | {_spread(ratios)} | {median_of(runs, 'goodput')} | "
                f"{median_of(runs, 'good')} / {median_of(runs, 'sent')} | {refused} | "
                f"{median_of(runs, 'refusal_p99_ms')} | "
                f"{median_of(runs, 'retractions_per_1000')} | {median_of(runs, 'ttft_p50_s')} |"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="short")
    parser.add_argument("--kv-tokens", type=int, help="the engine's cache (default: the workload's)")
    parser.add_argument("--seconds", type=float, default=40.0, help="sending window per cell")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fronts", default=",".join(FRONTS))
    parser.add_argument("--loads", default=",".join(map(str, LOADS)))
    parser.add_argument("--rate", type=float, help="1x in requests/s (default: measured)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    fronts = tuple(args.fronts.split(","))
    loads = tuple(int(x) for x in args.loads.split(","))
    workload = WORKLOADS[args.workload]
    kv_tokens = args.kv_tokens or workload.kv_tokens
    model = ensure_tiny_chat_model()
    texts = workload.texts(model)
    workdir = Path(tempfile.mkdtemp(prefix="kvant-bench-open-loop-"))
    engine_cpus = split_cpus()
    os.environ.update(dict(workload.engine_env))  # the engine inherits this process's environment
    report: dict[str, Any] = {
        "workload": args.workload,
        "kv_tokens": kv_tokens,
        "new_tokens": workload.new_tokens,
        "prompt_tokens": workload.prompt_tokens,
        "slo": vars(SLO) if hasattr(SLO, "__dict__") else str(SLO),
    }
    print(f"workload {args.workload}: {workload}, cache {kv_tokens} tokens", flush=True)
    with real_engine(
        model, kv_tokens, workdir, MAX_RUNNING, cpus=engine_cpus, engine_args=workload.engine_args
    ) as engine:
        one_x = args.rate or capacity(engine, kv_tokens, workload, texts)
        report["one_x_rps"] = round(one_x, 3)
        print(
            f"1x = {one_x:.2f} requests/s; SLO TTFT {SLO.ttft_seconds}s, TPOT {SLO.tpot_seconds}s", flush=True
        )
        cells: dict[str, list[dict[str, Any]]] = {f"{f}@{x}x": [] for f in fronts for x in loads}
        for run in range(args.runs):
            for load in loads:
                for front in fronts:
                    found = cell(
                        workdir,
                        engine,
                        model,
                        front,
                        rate=load * one_x,
                        run=run,
                        seconds=args.seconds,
                        new_tokens=workload.new_tokens,
                        texts=texts,
                    )
                    cells[f"{front}@{load}x"].append(found)
                    shown = {k: v for k, v in found.items() if k != "samples"}
                    print(f"run {run} {front:>9} {load}x {json.dumps(shown)}", flush=True)
        report["cells"] = cells
    table = medians(cells, loads, fronts)
    print("\n".join(table))
    report["table"] = table
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
