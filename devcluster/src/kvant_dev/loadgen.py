"""A bounded closed-loop load generator for SGLang's /generate API (loopback only, stops by itself).

Used by the protection e2e tests and bench/protection: N clients each send a request, wait for the
answer, and send the next, until the duration is up. Goodput is the usual serving definition: output
tokens of requests that completed within the latency SLO, per second. A request that finishes after its
user gave up is work the GPUs did for nobody.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp


@dataclass
class LoadResult:
    seconds: float
    slo_seconds: float
    statuses: Counter[int] = field(default_factory=Counter)
    completed_tokens: int = 0
    good_tokens: int = 0  # of requests that completed within the SLO
    latencies: list[float] = field(default_factory=list)
    errors: int = 0

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
) -> None:
    while time.monotonic() < deadline:
        started = time.monotonic()
        # Prompts are counted at 4 bytes per token by the gate and the simulator alike
        # (kvant_runtime.tokens). Each differs in its last bytes, so a simulator drawing natural answer
        # lengths per prompt draws a new one for each request.
        text = "x" * (4 * shape.prompt_tokens - 8) + f"{next(numbers) % 10**8:08d}"
        body = {"text": text, "sampling_params": {"max_new_tokens": shape.new_tokens}}
        try:
            timeout = aiohttp.ClientTimeout(total=max(1.0, deadline - started))
            async with session.post(url, json=body, timeout=timeout) as response:
                result.statuses[response.status] += 1
                if response.status == 200:
                    tokens = int((await response.json())["meta_info"]["completion_tokens"])
                    latency = time.monotonic() - started
                    result.latencies.append(latency)
                    result.completed_tokens += tokens
                    result.good_tokens += tokens if latency <= result.slo_seconds else 0
                elif response.status in (429, 503):
                    await asyncio.sleep(float(response.headers.get("Retry-After", "1")) / 4)
        except (aiohttp.ClientError, TimeoutError):
            result.errors += 1


@dataclass(frozen=True)
class LoadShape:
    clients: int
    seconds: float
    prompt_tokens: int
    new_tokens: int
    slo_seconds: float


async def run_load(base_url: str, shape: LoadShape) -> LoadResult:
    numbers = itertools.count()
    result = LoadResult(shape.seconds, shape.slo_seconds)
    deadline = time.monotonic() + shape.seconds
    connector = aiohttp.TCPConnector(limit=shape.clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        clients = [
            _client(session, f"{base_url}/generate", shape, numbers, deadline=deadline, result=result)
            for _ in range(shape.clients)
        ]
        await asyncio.gather(*clients)
    return result


def generate_load(base_url: str, shape: LoadShape) -> LoadResult:
    return asyncio.run(run_load(base_url, shape))


def engine_retractions(metrics_url: str) -> float:
    """sglang:num_retracted_requests_total summed over its series (absent until the first retraction),
    from `{metrics_url}/metrics`: the engine's own, or a serving pod's merged gate + engine metrics."""
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    prefix = "sglang:num_retracted_requests_total{"
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))
