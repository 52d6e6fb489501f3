"""The gate's added latency and its maximum request rate, against going to the simulator directly.

Three processes on loopback, as in a pod: `kvant sim` (with a zero-cost model, so the engine
answers at once and the HTTP path dominates), `kvant gate` in front of it (with limits that
never bind, so admission runs but never queues), and this load generator (aiohttp).

- Latency: an open loop at `--rate` requests/s, alternating direct and gated phases so drift
  in the machine's load hits both alike. Added latency = gated percentile - direct percentile.
- Maximum rate: a closed loop of `--clients` clients for `--seconds`, direct then gated.
Both for non-streaming `/generate` and streaming `/v1/chat/completions` (SSE, 8 tokens).
Everything is bounded by `--seconds`, and the processes are stopped at the end.

    python bench/gate/latency.py [--rate 500] [--seconds 10] [--clients 32] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

from kvant_contracts.limits import parse_limits, render_limits

KVANT = [sys.executable, "-m", "kvant_cli.main"]
NEW_TOKENS = 8
REQUESTS = {
    "non-streaming": (
        "/generate",
        {"text": "Say something short.", "sampling_params": {"max_new_tokens": NEW_TOKENS}},
    ),
    "streaming": (
        "/v1/chat/completions",
        {
            "model": "bench",
            "messages": [{"role": "user", "content": "Say something short."}],
            "max_tokens": NEW_TOKENS,
            "stream": True,
        },
    ),
}
# Limits that never bind: admission runs on every request but nothing waits.
OPEN_LIMITS = {"maxConcurrency": 100_000, "maxQueued": 0, "concurrency": {"min": 1, "max": 100_000}}
PHASES = 10  # direct, gated, direct, gated, ...: bursts of outside load hit both alike


@dataclass
class Latency:
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float


@dataclass
class Result:
    kind: str
    rate: float
    direct: Latency
    gated: Latency
    added_p50_ms: float
    added_p99_ms: float
    gate_cpu_us_per_request: float
    direct_max_rps: float
    gated_max_rps: float


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def process(args: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def wait_ready(session: aiohttp.ClientSession, url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args!r} exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(url) as resp:
                if resp.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise SystemExit(f"{url} never became ready")


async def one(session: aiohttp.ClientSession, url: str, body: bytes) -> float | None:
    """One request; its latency to the last byte in seconds, or None on an error."""
    started = time.perf_counter()
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
        async for _chunk in resp.content.iter_any():
            pass
        ok = resp.status == 200
    return time.perf_counter() - started if ok else None


async def open_loop(
    session: aiohttp.ClientSession, url: str, body: bytes, rate: float, seconds: float
) -> list[float | None]:
    """Sends at a fixed rate regardless of answers, so a slow target cannot slow its own load."""
    tasks = []
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(int(rate * seconds)):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(session, url, body)))
    return list(await asyncio.gather(*tasks))


async def closed_loop(
    session: aiohttp.ClientSession, url: str, body: bytes, clients: int, seconds: float
) -> float:
    """Requests per second that `clients` back-to-back clients complete."""
    deadline = time.perf_counter() + seconds
    done = 0

    async def client() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            if await one(session, url, body) is not None:
                done += 1

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return done / (time.perf_counter() - started)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc): robust where wall time is noisy."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summarize(samples: list[float | None]) -> Latency:
    ok = sorted(s for s in samples if s is not None)
    if not ok:
        return Latency(len(samples), len(samples), float("nan"), float("nan"))

    def ms_at(quantile: float) -> float:
        return round(ok[min(len(ok) - 1, int(quantile * len(ok)))] * 1e3, 3)

    return Latency(len(samples), len(samples) - len(ok), ms_at(0.50), ms_at(0.99))


async def measure(kind: str, direct: str, gated: str, gate_pid: int, args: argparse.Namespace) -> Result:
    path, payload = REQUESTS[kind]
    body = json.dumps(payload).encode()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        for base in (direct, gated):  # warm connections and code paths
            await open_loop(session, base + path, body, args.rate, 1.0)
        samples: dict[str, list[float | None]] = {direct: [], gated: []}
        gate_cpu = 0.0
        for phase in range(PHASES):
            base = (direct, gated)[phase % 2]
            cpu_before = cpu_seconds(gate_pid)
            samples[base] += await open_loop(session, base + path, body, args.rate, args.seconds / PHASES * 2)
            if base == gated:
                gate_cpu += cpu_seconds(gate_pid) - cpu_before
        direct_max = await closed_loop(session, direct + path, body, args.clients, args.seconds / 2)
        gated_max = await closed_loop(session, gated + path, body, args.clients, args.seconds / 2)
    d, g = summarize(samples[direct]), summarize(samples[gated])
    return Result(
        kind,
        args.rate,
        d,
        g,
        round(g.p50_ms - d.p50_ms, 3),
        round(g.p99_ms - d.p99_ms, 3),
        round(gate_cpu / len(samples[gated]) * 1e6),
        round(direct_max),
        round(gated_max),
    )


async def run(args: argparse.Namespace) -> list[Result]:
    sim_port, gate_port = free_port(), free_port()
    direct, gated = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{gate_port}"
    sim_args = [*KVANT, "sim", "--model-name", "bench", "--port", str(sim_port), "--kv-tokens", "10000000"]
    sim_args += ["--max-running-requests", "4096", "--decode-base-ms", "0", "--decode-per-request-ms", "0"]
    sim_args += ["--prefill-per-token-us", "0", "--kv-read-gbps", "1e12"]
    with tempfile.TemporaryDirectory() as tmp:
        limits = Path(tmp) / "limits.json"
        limits.write_text(render_limits(parse_limits(OPEN_LIMITS)))
        gate_args = [*KVANT, "gate", "--listen", f"127.0.0.1:{gate_port}", "--upstream", direct]
        gate_args += ["--limits", str(limits)]
        with process(sim_args) as sim, process(gate_args) as gate:
            async with aiohttp.ClientSession() as session:
                await wait_ready(session, direct + "/health", sim)
                await wait_ready(session, gated + "/health", gate)
            return [await measure(kind, direct, gated, gate.pid, args) for kind in REQUESTS]


def table(results: list[Result]) -> str:
    rows = [
        "| request | rate | direct p50 / p99 (ms) | gated p50 / p99 (ms) | added p50 / p99 (ms) "
        "| gate CPU/request | max req/s direct / gated |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rows.append(
            f"| {r.kind} | {r.rate:g}/s | {r.direct.p50_ms:.2f} / {r.direct.p99_ms:.2f} "
            f"| {r.gated.p50_ms:.2f} / {r.gated.p99_ms:.2f} | {r.added_p50_ms:+.2f} / {r.added_p99_ms:+.2f} "
            f"| {r.gate_cpu_us_per_request:.0f} µs | {r.direct_max_rps:.0f} / {r.gated_max_rps:.0f} |"
        )
    errors = sum(r.direct.errors + r.gated.errors for r in results)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return "\n".join(rows) + f"\n\nerrors: {errors}; cpus: {os.cpu_count()}; load average: {load}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=500.0, help="open-loop requests/s (default 500)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per latency run (default 10)")
    parser.add_argument("--clients", type=int, default=32, help="closed-loop clients for max req/s")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
