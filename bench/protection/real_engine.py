"""Protection measured on the real SGLang engine (0.5.23, CPU backend), and the simulator held to it.

The engine is SGLang itself, from the local cluster's engine image (hack/engine-image.sh), launched by
Kvant's launcher as a serving pod launches it (`bench/real_engine.py`), serving the tiny trained chat
model (`kvant_dev.tinychat`: its own BPE tokenizer and chat template) with `--max-total-tokens`
KV tokens (default 4,096) on loopback. Three parts, one run:

1. **The prompt count's error.** Prose, code and JSON prompts go straight to the engine; its reported
   `prompt_tokens` is the truth. Printed: the bytes ÷ 4 estimate and the model-tokenizer count the
   gate uses, each as a ratio to the truth (text prompts and chat messages).
2. **Protection.** Closed-loop clients (`kvant_dev.loadgen`) send real prose prompts and every answer
   runs to its `max_new_tokens` (SGLang's `min_new_tokens`; not `ignore_eos`, with which SGLang would
   reserve each request's whole limit and never retract): the overload regime. 1x is the number of
   clients whose prompt plus answer fill the cache; the grid is 1x, 2x and 4x, behind five fronts:
   the gate in `off`, `worstCase` and `forecast` (counting with the model's tokenizer), `forecast`
   counting bytes ÷ 4 (the gate without a tokenizer, as before), and GIE's saturation detector
   (`saturation_detector.py`). Goodput counts output tokens of requests completed within the SLO
   (k x the median latency at 1x through `off`, measured first: on a CPU the decode step's time grows
   with the batch, so one client's latency is no reference). The engine runs alone on the last CPU,
   the clients and the fronts on the others (`split_cpus`). Retractions are the
   engine's own counter, per 1,000 completed requests. The engine's radix cache is flushed between
   cells.
3. **The simulator beside the real engine.** A CPU profile for the simulator's cost model is fitted to
   this engine first (`cpu_profile.py`). Then the same fixed set of requests (2x clients, each
   sending the same prompts) goes straight to the real engine and to `kvant sim --tokenizer` with
   that profile (the model's tokenizer, the same `--max-total-tokens` and
   `--max-running-requests`), twice: every client's first request at once (a burst), and 20 ms
   apart; the burst also on the simulator's GPU profile. Each engine's state (`/v1/loads`, published
   by both at the same moments) and counters (`/metrics`) are sampled every 0.25 s. Printed side by
   side: token usage (mean, peak, by quarter of the run), the largest running batch, the mean queue,
   when the first retraction came (share of requests finished by then), retractions, the prompt and
   generated token totals, the run's seconds and its requests' latency, and what falls outside the
   bands of `sim_course.py`.

    python bench/protection/real_engine.py [--kv-tokens 4096] [--seconds 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp

from kvant_contracts import prometheus_text
from kvant_contracts import sglang_metrics as metric_names
from kvant_dev.loadgen import LoadResult, LoadShape, engine_retractions, generate_load
from kvant_dev.netutil import free_port, http_ok, wait_until
from kvant_dev.tinychat import ensure_tiny_chat_model
from kvant_runtime.gate.engine_load import fetch_loads
from kvant_runtime.prompt_counter import ByteEstimate, ModelTokenizer

# Run by path, the bench has its own folder on sys.path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.protection import cpu_profile
from bench.protection.sim_course import compare
from bench.protection.stack import DETECTOR, serving_front
from bench.real_engine import real_engine

PROSE = (
    "The harbour wakes before the town does, and the boats round the breakwater in the grey light.",
    "To build a simple bookshelf you need four boards of the same length, screws and patience.",
    "Meeting notes: the release slipped a day because a flaky test depended on dictionary order.",
    "Our neighbour keeps bees at the bottom of her orchard and brings us dark honey every autumn.",
    "The night train left at eleven; by morning the fields outside were white with frost.",
    "Measure twice and cut once is the oldest advice in the workshop, and it is still the best.",
)
ODD = (
    'def area(r: float) -> float:\n    return 3.14159 * r ** 2  # {"unit": "m2"}\n',
    '{"id": 7, "tags": ["kv", "fp8"], "limits": {"maxConcurrency": 64, "queueTimeoutSeconds": 30}}',
    "SELECT name, count(*) FROM requests WHERE status = 429 GROUP BY name ORDER BY 2 DESC;",
)
FRONTS = ("off", "worstCase", "forecast", "forecast-bytes", DETECTOR)
LOADS = (1, 2, 4)
NEW_TOKENS = 96
# The gate's limits here: as the simulator benches' (stack.LIMITS), with a queue as long as a CPU
# engine's answers take (a 2 s timeout would turn away what the engine finishes in 5).
GATE_LIMITS: dict[str, object] = {"maxQueued": 64, "queueTimeoutSeconds": 10}
# Requests sent in a cell's window may finish this long after it (counted late, not cut): a cut
# request would free its KV at once and hide what the engine was holding.
DRAIN_SECONDS = 60.0
MAX_RUNNING = 64
SAMPLE_SECONDS = 0.25
SPREAD_SECONDS = 0.02  # between the clients' first requests in the spread trace


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        answer: dict[str, Any] = json.load(response)
    return answer


def count_error(engine: str, model: Path) -> dict[str, Any]:
    """The gate's two counts against the engine's, per prompt: ratios count / truth."""
    exact, estimate = ModelTokenizer(model), ByteEstimate()
    rows: dict[str, list[tuple[int, int, int]]] = {"text": [], "chat": []}
    for text in (*PROSE, *ODD):
        truth = post(f"{engine}/generate", {"text": text, "sampling_params": {"max_new_tokens": 1}})
        rows["text"].append((truth["meta_info"]["prompt_tokens"], estimate.text(text), exact.text(text)))
        messages = [{"role": "user", "content": text}]
        chat = post(
            f"{engine}/v1/chat/completions", {"model": "bench", "messages": messages, "max_tokens": 1}
        )
        request = {"messages": messages}
        rows["chat"].append((chat["usage"]["prompt_tokens"], estimate.chat(request), exact.chat(request)))
    report = {}
    for kind, found in rows.items():
        by_bytes = [e / t for t, e, _ in found]
        report[kind] = {
            "prompts": len(found),
            "truth_tokens": sum(t for t, _, _ in found),
            "bytes_estimate_tokens": sum(e for _, e, _ in found),
            "bytes_ratio_min": round(min(by_bytes), 2),
            "bytes_ratio_median": round(statistics.median(by_bytes), 2),
            "bytes_ratio_max": round(max(by_bytes), 2),
            "tokenizer_exact": sum(x == t for t, _, x in found),
        }
    return report


def flush(engine: str, wait_seconds: float = 180) -> None:
    """Empties SGLang's radix cache, so each cell starts from the same engine state. SGLang refuses
    (400) while requests still run, and the last cell's cut requests may: retry until it is idle."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            request = urllib.request.Request(f"{engine}/flush_cache", method="POST")
            with urllib.request.urlopen(request, timeout=30):
                return
        except urllib.error.HTTPError as error:
            if error.code != 400 or time.monotonic() > deadline:
                raise
            time.sleep(1)


def gate_flags(front: str, model: Path) -> list[str]:
    return [] if front in ("forecast-bytes", DETECTOR) else ["--tokenizer", str(model)]


def front_mode(front: str) -> str:
    return "forecast" if front == "forecast-bytes" else front


def protection(
    engine: str,
    model: Path,
    workdir: Path,
    *,
    kv_tokens: int,
    seconds: float,
    k: float,
    fronts: tuple[str, ...] = FRONTS,
    loads: tuple[int, ...] = LOADS,
) -> dict[str, Any]:
    prompt = statistics.mean(ModelTokenizer(model).text(t) for t in PROSE) + 9  # + the request number
    one_x = max(1, round(kv_tokens / (prompt + NEW_TOKENS)))
    # The SLO's reference is the latency with the cache just full (1x through `off`), not one client's:
    # on a CPU the decode step's time grows with the batch (compute-bound, where a GPU's is
    # memory-bound), so 1x alone takes many times the unloaded latency and no request would meet k x it.
    base = LoadShape(one_x, seconds, int(prompt), NEW_TOKENS, 1e9, texts=PROSE, run_to_limit=True)
    flush(engine)
    with serving_front(workdir, engine, "off", GATE_LIMITS, gate_flags("off", model)) as stack:
        full = generate_load(stack.front, base)
    latency = statistics.median(full.latencies)
    slo = k * latency
    print(f"1x = {one_x} clients; latency at 1x {latency:.2f} s; SLO {slo:.2f} s", flush=True)
    cells: dict[str, Any] = {}
    for front in fronts:
        for load in loads:
            flush(engine)
            shape = LoadShape(
                load * one_x,
                seconds,
                int(prompt),
                NEW_TOKENS,
                slo,
                texts=PROSE,
                run_to_limit=True,
                drain_seconds=DRAIN_SECONDS,
            )
            with serving_front(
                workdir, engine, front_mode(front), GATE_LIMITS, gate_flags(front, model)
            ) as stack:
                before = engine_retractions(engine)
                result = generate_load(stack.front, shape)
                retractions = engine_retractions(engine) - before
            cells[f"{front}@{load}x"] = _cell(result, retractions)
            print(f"{front:>18} {load}x  {json.dumps(cells[f'{front}@{load}x'])}", flush=True)
    return {"one_x_clients": one_x, "latency_at_1x_s": latency, "slo_s": slo, "cells": cells}


def _cell(result: LoadResult, retractions: float) -> dict[str, Any]:
    done = result.completed
    return {
        "goodput": round(result.goodput, 1),
        "completed": done,
        "statuses": {str(k): v for k, v in sorted(result.statuses.items())},
        "errors": result.errors,
        "retractions": int(retractions),
        "retractions_per_1000": round(1000 * retractions / done, 1) if done else None,
    }


@contextmanager
def simulator(model: Path, kv_tokens: int, cost_flags: tuple[str, ...] = ()) -> Iterator[str]:
    """`kvant sim` beside the engine: the same cache, batch bound and tokenizer; `cost_flags` set its
    cost model (none: the GPU defaults)."""
    port = free_port()
    command = [sys.executable, "-m", "kvant_cli.main", "sim", "--port", str(port), "--model-name", "bench"]
    command += ["--kv-tokens", str(kv_tokens), "--max-running-requests", str(MAX_RUNNING)]
    command += ["--tokenizer", str(model), *cost_flags]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/health"), 60, "the simulator")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=20)


def side_by_side(engine: str, model: Path, kv_tokens: int, clients: int, per_client: int) -> dict[str, Any]:
    """Two traces, on the engine and on the simulator with a CPU profile fitted to this engine first
    (cpu_profile.py): every client's first request at once (a burst, which also warms the engine), and
    20 ms apart (the spread trace, on the engine twice for its own spread); the burst also on the
    simulator's GPU profile. Each simulator run is judged against the engine's by sim_course's bands."""
    flush(engine)
    profile, points = asyncio.run(cpu_profile.fit(engine, kv_bytes_per_token(model)))
    print(json.dumps({"cpu_profile": asdict(profile), "points": points}, indent=1), flush=True)
    cpu_flags = tuple(profile.sim_flags(kv_bytes_per_token(model)))
    report: dict[str, Any] = {"cpu_profile": asdict(profile)}
    for trace, stagger, engine_runs in (("burst", 0.0, 1), ("spread", SPREAD_SECONDS, 2)):
        real = []
        for _ in range(engine_runs):
            flush(engine)
            real.append(asyncio.run(fixed_run(engine, clients, per_client, stagger)))
        with simulator(model, kv_tokens, cpu_flags) as sim:
            simulated = asyncio.run(fixed_run(sim, clients, per_client, stagger))
        report[trace] = {"real": real, "simulator_cpu": simulated, "outside": compare(real, simulated)}
    with simulator(model, kv_tokens) as sim:
        gpu = asyncio.run(fixed_run(sim, clients, per_client))
    report["burst"]["simulator_gpu"] = gpu
    report["burst"]["gpu_outside"] = compare(report["burst"]["real"], gpu)
    return report


def kv_bytes_per_token(model: Path) -> int:
    """BF16 K and V of every layer's KV heads: what one token holds in the engine's cache."""
    config = json.loads((model / "config.json").read_text())
    heads = config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim", config["hidden_size"] // config["num_attention_heads"])
    return 2 * 2 * int(config["num_hidden_layers"]) * int(heads) * int(head_dim)


async def fixed_run(engine: str, clients: int, per_client: int, stagger_s: float = 0.0) -> dict[str, Any]:
    """`clients` closed-loop clients, each sending `per_client` requests straight to the engine, while
    its metrics are sampled; the same prompts in the same order for every engine."""
    samples: list[dict[str, float]] = []
    latencies: list[float] = []
    finished = [0]
    first_retraction: list[float] = []
    stop = asyncio.Event()
    total = clients * per_client
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:

        async def client(index: int) -> None:
            await asyncio.sleep(index * stagger_s)  # the clients' first requests spread (0: a burst)
            for i in range(per_client):
                number = index * per_client + i
                # The number's digits reversed: zero-padded, every prompt began with the same few
                # tokens ("0000"), which SGLang's radix cache holds once for all of them and the
                # simulator (no prefix cache) once per request, 3-4 % of the cache.
                text = f"{f'{number:08d}'[::-1]} {PROSE[number % len(PROSE)]}"
                body = {
                    "text": text,
                    "sampling_params": {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS},
                }
                sent = time.monotonic()
                async with session.post(f"{engine}/generate", json=body) as response:
                    await response.read()
                latencies.append(time.monotonic() - sent)
                finished[0] += 1

        # The counters run from the engine's start (the protection grid came first): this run's share
        # is what they gain from here.
        start = await _engine_sample(session, engine)

        async def sampler() -> None:
            while not stop.is_set():
                sample = await _engine_sample(session, engine)
                samples.append(sample)
                if sample["retracted"] > start["retracted"] and not first_retraction:
                    first_retraction.append(finished[0] / total)
                await asyncio.sleep(SAMPLE_SECONDS)

        watcher = asyncio.create_task(sampler())
        began = time.monotonic()
        await asyncio.gather(*(client(c) for c in range(clients)))
        took = time.monotonic() - began
        stop.set()
        await watcher
        final = await _engine_sample(session, engine)
    usage = [s["token_usage"] for s in samples]
    quarters = [usage[len(usage) * q // 4 : len(usage) * (q + 1) // 4] for q in range(4)]
    return {
        "token_usage_mean": round(statistics.mean(usage), 3) if usage else None,
        "token_usage_peak": round(max(usage), 3) if usage else None,
        "largest_running_batch": int(max((s["running"] for s in samples), default=0)),
        "queue_mean": round(statistics.mean(s["queued"] for s in samples), 1) if samples else None,
        "first_retraction_at_share_done": round(first_retraction[0], 2) if first_retraction else None,
        "retractions": int(final["retracted"] - start["retracted"]),
        "prompt_tokens": int(final["prompt_tokens"] - start["prompt_tokens"]),
        "generation_tokens": int(final["generation_tokens"] - start["generation_tokens"]),
        "seconds": round(took, 1),
        "latency_median_s": round(statistics.median(latencies), 2),
        "latency_p90_s": round(sorted(latencies)[int(0.9 * (len(latencies) - 1))], 2),
        # Token usage over the run's time, in quarters of its own length: the cache's course.
        "token_usage_by_quarter": [round(statistics.mean(q), 3) if q else None for q in quarters],
    }


async def _engine_sample(session: aiohttp.ClientSession, engine: str) -> dict[str, float]:
    """The engine's state from its `/v1/loads` snapshot, its counters from `/metrics`.

    The state (KV tokens used, running, waiting) is read where both engines publish it at the same
    moments: SGLang 0.5.23 and the simulator publish `/v1/loads` on every prefill batch and every 15
    decode steps (`kvant_runtime.gate.engine_load`, what the gate acts on). SGLang's /metrics gauges
    are no such measure: it sets them from its log lines, on every prefill batch (which counts the
    running batch before the new requests join, and whose usage reads low: one read 0.53 with 39
    running and one joining, 54 tokens each where a prompt alone is 40, and the next decode line 0.74
    with 41) and otherwise every 40 decode steps; the simulator's gauges follow every step. Read from
    /metrics, the engine's usage looked 5-12 % lower than the simulator's for the same course."""
    load = await fetch_loads(session, engine, 10.0, time.monotonic())
    async with session.get(f"{engine}/metrics") as response:
        text = await response.text()
    names = {
        "retracted": metric_names.NUM_RETRACTED_REQUESTS_TOTAL,
        "prompt_tokens": metric_names.PROMPT_TOKENS_TOTAL,
        "generation_tokens": metric_names.GENERATION_TOKENS_TOTAL,
    }
    series: dict[str, list[metric_names.Series]] = {metric: [] for metric in names.values()}
    for sample in prometheus_text.samples(text):
        if sample.name in series:
            series[sample.name].append((metric_names.scheduler_of(sample.labels), sample.value))
    counters = {key: metric_names.combine(metric, series[metric]) or 0.0 for key, metric in names.items()}
    state = {
        "token_usage": load.used_tokens / load.capacity,
        "running": float(load.running),
        "queued": float(load.waiting),
    }
    return state | counters


def split_cpus() -> set[int] | None:
    """Gives the engine the last CPU and this process (the clients, gates and simulator it starts) the
    rest. A CPU engine is compute-bound, so a client or a gate sharing its core takes from its decode
    steps, and a front that spends more CPU (a tokenizer, 429s answered) would slow the very engine it
    protects; apart, each front is measured by what it lets the engine do. None on one CPU."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        return None
    engine = {max(cpus)}
    os.sched_setaffinity(0, cpus - engine)
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kv-tokens", type=int, default=4096, help="the engine's --max-total-tokens")
    parser.add_argument("--seconds", type=float, default=40.0, help="measured seconds per protection cell")
    parser.add_argument("--slo-factor", type=float, default=2.0, help="SLO = this x the latency at 1x")
    parser.add_argument("--per-client", type=int, default=4, help="requests per client, side by side")
    parser.add_argument("--skip", choices=["count", "protection", "simulator"], action="append", default=[])
    parser.add_argument("--fronts", default=",".join(FRONTS), help="protection fronts, comma-separated")
    parser.add_argument("--loads", default=",".join(map(str, LOADS)), help="loads (x 1x), comma-separated")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    # SIGTERM (a timeout, a Ctrl-C from another shell) unwinds, so the engine's process group is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    model = ensure_tiny_chat_model()
    workdir = Path(tempfile.mkdtemp(prefix="kvant-bench-real-engine-"))
    report: dict[str, Any] = {"kv_tokens": args.kv_tokens, "new_tokens": NEW_TOKENS}
    engine_cpus = split_cpus()
    report["engine_cpus"] = sorted(engine_cpus or [])
    started = time.monotonic()
    with real_engine(model, args.kv_tokens, workdir, MAX_RUNNING, cpus=engine_cpus) as engine:
        print(
            f"real engine up in {time.monotonic() - started:.0f} s on CPUs {report['engine_cpus']}",
            flush=True,
        )
        if "count" not in args.skip:
            report["prompt_count"] = count_error(engine, model)
            print(json.dumps(report["prompt_count"], indent=1), flush=True)
        if "protection" not in args.skip:
            report["protection"] = protection(
                engine,
                model,
                workdir,
                kv_tokens=args.kv_tokens,
                seconds=args.seconds,
                k=args.slo_factor,
                fronts=tuple(args.fronts.split(",")),
                loads=tuple(int(x) for x in args.loads.split(",")),
            )
        if "simulator" not in args.skip:
            one_x = (report.get("protection") or {}).get("one_x_clients", 32)
            report["side_by_side"] = side_by_side(engine, model, args.kv_tokens, 2 * one_x, args.per_client)
            print(json.dumps(report["side_by_side"], indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
