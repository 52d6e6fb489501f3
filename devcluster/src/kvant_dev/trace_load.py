"""An open-loop load generator that replays a serving trace (loopback only, bounded in time).

A closed loop (`kvant_dev.loadgen`) hides overload: each client waits for its answer before sending
the next, so the offered load falls as latency grows. Users of a service arrive whether or not it is
slow. Here arrivals are a Poisson process, optionally with bursts (the rate is multiplied by
`burst_factor` for `burst_seconds` of every `burst_every`, the mean kept at `rate`), and each request's
prompt is drawn from a lognormal, with a share of long-context prompts from a second one. Output
lengths are the model's to choose (the simulator's `--output-lengths`) under `max_tokens`.

Every request streams (`"stream": true` on SGLang's /generate), so time to first token is measured
where the client sees it, and the answer's length is read from its last event. Everything is drawn
from one seed, so a trace repeats exactly. Requests still unanswered `drain_seconds` after the last
arrival are cut and recorded as such.

A replay may add headers to each request (`headers`, called with the request's number and arrival):
an API key naming its tenant, or `X-Kvant-Deadline-Ms`, the time the client can still wait.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp

CHARS_PER_TOKEN = 4  # as the gate and the simulator count prompts (kvant_runtime.tokens)
MIN_PROMPT = 16
TAIL_BYTES = 1 << 18  # of a stream, kept to read its last event (SGLang's repeats the text so far)
CUT = 0  # the status of a request cut at the end of the drain, or failed on the wire


@dataclass(frozen=True)
class Trace:
    rate: float  # mean arrivals per second
    seconds: float  # arrivals for this long
    prompt_median: float = 1000.0
    prompt_sigma: float = 0.6
    max_tokens: int = 4096
    long_fraction: float = 0.0  # share of long-context prompts
    long_median: float = 8000.0
    long_sigma: float = 0.3
    max_prompt: int = 16_000
    burst_factor: float = 1.0  # 1: plain Poisson
    burst_every: float = 10.0
    burst_seconds: float = 2.0
    seed: int = 0


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the start
    prompt_tokens: int


# Extra headers for request `number` (its index in the trace), from its arrival.
Headers = Callable[[int, "Arrival"], Mapping[str, str]]


@dataclass
class Outcome:
    arrival: Arrival
    status: int = CUT
    output_tokens: int = 0
    ttft: float | None = None
    latency: float | None = None


def arrivals(trace: Trace) -> list[Arrival]:
    """The trace's arrivals: a Poisson process thinned from its peak rate to the burst profile."""
    if not (trace.rate > 0 and trace.seconds > 0 and trace.burst_factor >= 1):
        raise ValueError(f"a trace needs rate > 0, seconds > 0 and burst_factor >= 1: {trace}")
    rng = random.Random(trace.seed)
    burst_share = min(1.0, trace.burst_seconds / trace.burst_every)
    base = trace.rate / (1.0 + (trace.burst_factor - 1.0) * burst_share)
    peak = base * trace.burst_factor
    found: list[Arrival] = []
    at = 0.0
    while True:
        at += rng.expovariate(peak)
        if at >= trace.seconds:
            return found
        bursting = (at % trace.burst_every) < trace.burst_seconds
        if rng.random() * peak <= (peak if bursting else base):
            found.append(Arrival(at, draw_prompt(trace, rng)))


def draw_prompt(trace: Trace, rng: random.Random) -> int:
    """One prompt length of the trace: from the long-context lognormal for `long_fraction` of draws."""
    long = rng.random() < trace.long_fraction
    median, sigma = (
        (trace.long_median, trace.long_sigma) if long else (trace.prompt_median, trace.prompt_sigma)
    )
    drawn = round(median * math.exp(sigma * rng.gauss(0.0, 1.0)))
    return max(MIN_PROMPT, min(trace.max_prompt, drawn))


def prompt_text(arrival: Arrival, number: int) -> str:
    """The prompt sent for request `number`: its length in tokens, as the gate and simulator count."""
    # Each prompt differs in its last bytes, so the simulator draws a new answer length for each.
    return "x" * (CHARS_PER_TOKEN * arrival.prompt_tokens - 8) + f"{number % 10**8:08d}"


async def _send(
    session: aiohttp.ClientSession,
    url: str,
    outcome: Outcome,
    number: int,
    max_tokens: int,
    *,
    headers: Headers | None = None,
) -> None:
    """One request; its outcome stays CUT if the drain ends first (the task is cancelled)."""
    text = prompt_text(outcome.arrival, number)
    body = {"text": text, "sampling_params": {"max_new_tokens": max_tokens}, "stream": True}
    extra = dict(headers(number, outcome.arrival)) if headers is not None else None
    sent = time.monotonic()
    try:
        async with session.post(url, json=body, headers=extra) as response:
            if response.status != 200:
                await response.read()
                outcome.status = response.status
                return
            tail = bytearray()
            async for chunk in response.content.iter_any():
                if outcome.ttft is None and b"data:" in chunk:
                    outcome.ttft = time.monotonic() - sent
                tail += chunk
                if len(tail) > 2 * TAIL_BYTES:  # trimmed now and then, not copied on every chunk
                    del tail[:-TAIL_BYTES]
            outcome.output_tokens = _last_count(bytes(tail[-TAIL_BYTES:]))
            outcome.latency = time.monotonic() - sent
            outcome.status = 200
    except (aiohttp.ClientError, TimeoutError):
        outcome.status = CUT


def _last_count(tail: bytes) -> int:
    for event in reversed(tail.split(b"\n\n")):
        data = event.strip().removeprefix(b"data:").strip()
        if data and data != b"[DONE]":
            try:
                return int(json.loads(data)["meta_info"]["completion_tokens"])
            except (ValueError, KeyError, TypeError):
                return 0
    return 0


async def replay(
    base_url: str, trace: Trace, drain_seconds: float, headers: Headers | None = None
) -> list[Outcome]:
    """Sends every arrival at its time and waits at most `drain_seconds` past the last for answers."""
    outcomes = [Outcome(a) for a in arrivals(trace)]
    url = f"{base_url}/generate"
    start = time.monotonic()
    deadline = start + trace.seconds + drain_seconds
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=trace.seconds + drain_seconds)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = []
        for number, outcome in enumerate(outcomes):
            await asyncio.sleep(max(0.0, start + outcome.arrival.at - time.monotonic()))
            sent = _send(session, url, outcome, number, trace.max_tokens, headers=headers)
            tasks.append(asyncio.create_task(sent))
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return outcomes


def replay_trace(
    base_url: str, trace: Trace, drain_seconds: float, headers: Headers | None = None
) -> list[Outcome]:
    return asyncio.run(replay(base_url, trace, drain_seconds, headers))
