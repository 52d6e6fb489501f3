"""A bounded closed-loop load generator for SGLang's /generate API (loopback only, stops by itself).

Used by the protection e2e tests and bench/protection: N clients each send a request, wait for the
answer, and send the next, until the duration is up (or, given a `stop` event, until it is set: a
test that needs load across an event of unknown length stops it when the event is over). Goodput is
the usual serving definition: output tokens of requests that completed within the latency SLO, per
second. A request that finishes after its user gave up is work the GPUs did for nobody.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp

from kvant_contracts.prometheus_text import Sample, samples
from kvant_contracts.sglang_metrics import (
    NUM_RETRACTED_REQUESTS_TOTAL,
    NUM_RUNNING_REQS,
    retractions_total,
    scheduler_of,
)


@dataclass
class LoadResult:
    seconds: float
    slo_seconds: float
    statuses: Counter[int] = field(default_factory=Counter)
    completed_tokens: int = 0
    good_tokens: int = 0  # of requests that completed within the SLO
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_refusal: str = ""  # the first answer other than 200, status and body: what a failure shows
    first_error: str = ""  # the first request with no answer: the exception's type and message

    @property
    def goodput(self) -> float:
        """Output tokens per second of requests that met the latency SLO."""
        return self.good_tokens / self.seconds if self.seconds else 0.0

    @property
    def throughput(self) -> float:
        """Output tokens per second of every completed request, late or not."""
        return self.completed_tokens / self.seconds if self.seconds else 0.0

    @property
    def completed(self) -> int:
        return self.statuses[200]


async def _client(
    session: aiohttp.ClientSession,
    url: str,
    shape: LoadShape,
    numbers: Iterator[int],
    *,
    deadline: float,
    result: LoadResult,
    stop: threading.Event | None,
) -> None:
    while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        started = time.monotonic()
        body: dict[str, object] = {"text": shape.prompt(next(numbers)), "sampling_params": shape.sampling()}
        if shape.model:
            body["model"] = shape.model
        try:
            timeout = aiohttp.ClientTimeout(total=max(1.0, deadline + shape.drain_seconds - started))
            async with session.post(url, json=body, timeout=timeout) as response:
                result.statuses[response.status] += 1
                if response.status == 200:
                    tokens = int((await response.json())["meta_info"]["completion_tokens"])
                    latency = time.monotonic() - started
                    result.latencies.append(latency)
                    result.completed_tokens += tokens
                    result.good_tokens += tokens if latency <= result.slo_seconds else 0
                    continue
                if not result.first_refusal:
                    result.first_refusal = f"{response.status} {(await response.text())[:300]}"
                if response.status in (429, 503):
                    await asyncio.sleep(float(response.headers.get("Retry-After", "1")) / 4)
        except (aiohttp.ClientError, TimeoutError) as error:
            result.errors += 1
            if not result.first_error:
                took = time.monotonic() - started
                result.first_error = f"{type(error).__name__} after {took:.1f}s: {error}"


@dataclass(frozen=True)
class LoadShape:
    clients: int
    seconds: float
    prompt_tokens: int
    new_tokens: int
    slo_seconds: float
    # Real text for a model with a real tokenizer: request N sends texts[N % len] (prompt_tokens is
    # then only what the caller expects). Empty: the bytes-counted filler below.
    texts: tuple[str, ...] = ()
    # Every answer runs to new_tokens (SGLang's min_new_tokens) without ignore_eos, which would make
    # SGLang reserve each request's whole limit and never retract: the overload case.
    run_to_limit: bool = False
    # How long a request sent before the end may still take: 0 cuts every request at the end (counted
    # in `errors`); more lets what was sent finish, so `errors` counts only real failures.
    drain_seconds: float = 0.0
    # Bytes of filler per prompt token: 4 where the engine counts bytes / 4 (no tokenizer), 1 for the
    # tiny test checkpoints, whose byte-level tokenizer counts every byte (kvant_dev.tinymodel).
    bytes_per_token: int = 4
    # The model each request names: a router's (smg's) multi-model mode routes /generate by it (see
    # docs/concepts/router.md). Empty: no field, as a gate or an engine alone expects.
    model: str = ""

    def prompt(self, number: int) -> str:
        if self.texts:
            return f"{number % 10**8:08d} {self.texts[number % len(self.texts)]}"
        # Each prompt differs in its last bytes, so a simulator drawing natural answer lengths per
        # prompt draws a new one for each request.
        return "x" * (self.bytes_per_token * self.prompt_tokens - 8) + f"{number % 10**8:08d}"

    def sampling(self) -> dict[str, int]:
        sampling = {"max_new_tokens": self.new_tokens}
        if self.run_to_limit:
            sampling["min_new_tokens"] = self.new_tokens
        return sampling


async def run_load(base_url: str, shape: LoadShape, stop: threading.Event | None = None) -> LoadResult:
    numbers = itertools.count()
    result = LoadResult(shape.seconds, shape.slo_seconds)
    started = time.monotonic()
    deadline = started + shape.seconds
    connector = aiohttp.TCPConnector(limit=shape.clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        clients = [
            _client(
                session, f"{base_url}/generate", shape, numbers, deadline=deadline, result=result, stop=stop
            )
            for _ in range(shape.clients)
        ]
        await asyncio.gather(*clients)
    if stop is not None and stop.is_set():
        # Stopped early: the rates are per second of the load's own length, not of the bound.
        result.seconds = min(shape.seconds, time.monotonic() - started)
    return result


def generate_load(base_url: str, shape: LoadShape, stop: threading.Event | None = None) -> LoadResult:
    return asyncio.run(run_load(base_url, shape, stop))


class EngineMetricsMissing(Exception):
    """A metrics page without the engine's series: a serving pod's gate could not read its engine."""


# Reads of a page that lacks the engine's series before giving up: the gate's merged page leaves the
# engine out when its read of the engine fails (a busy CPU engine, a few seconds).
ENGINE_METRICS_ATTEMPTS = 30
# Reads of the counter itself, the largest kept: SGLang's page sometimes leaves the counter out while
# its other series are there (a rehearsal read 12, then 0, with no engine restart: 2026-12-05).
COUNTER_READS = 3


def engine_retractions(metrics_url: str) -> float:
    """The engine's retractions so far (`retractions_total`: 0 until the first one), from
    `{metrics_url}/metrics`: the engine's own, or a serving pod's merged gate + engine metrics.

    A merged page the gate served without the engine's series is read again, a second apart: read
    as 0 it made a phase's difference count every earlier retraction (a CI run reported 15 for a
    phase whose engine log shows 1, 2026-12-05) or go negative. The counter is read COUNTER_READS
    times and the largest kept, since a counter only falls when its engine restarts. Raises
    EngineMetricsMissing when the engine stays out of the page."""
    return max(_one_read(metrics_url) for _ in range(COUNTER_READS))


def _one_read(metrics_url: str) -> float:
    for attempt in range(ENGINE_METRICS_ATTEMPTS):
        with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=5) as response:
            page = samples(response.read().decode())
        if any(sample.name == NUM_RUNNING_REQS for sample in page):
            return _retractions_in(page)
        if attempt + 1 < ENGINE_METRICS_ATTEMPTS:
            time.sleep(1.0)
    raise EngineMetricsMissing(
        f"{metrics_url}/metrics has no {NUM_RUNNING_REQS} in {ENGINE_METRICS_ATTEMPTS} reads: the engine's "
        "series are missing"
    )


def _retractions_in(page: list[Sample]) -> float:
    return retractions_total(
        (scheduler_of(sample.labels), sample.value)
        for sample in page
        if sample.name == NUM_RETRACTED_REQUESTS_TOTAL
    )
