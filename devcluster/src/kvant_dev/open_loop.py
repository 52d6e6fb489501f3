"""A bounded open-loop load generator: requests arrive on a seeded Poisson schedule whatever the
answers' speed, as users do (loopback only; it stops by itself).

A closed loop slows its own arrivals when the server slows, which hides overload: an open loop keeps
sending, so a front that lets the engine's queue grow shows it in every later request's time to first
token. Each request streams SGLang's native `/generate` and is timed to its first token (TTFT) and
per output token after it (TPOT). A request is *good* when it answered 200 with every token it asked
for, within the SLO on both. Goodput is good output tokens per second of the sending window.

The schedule depends only on (rate, seconds, seed), so every front of one cell gets the same arrivals.
Requests still running `drain_seconds` after the window are cut (not good). The client may send its
TTFT budget as the gate's deadline header (`X-Kvant-Deadline-Ms`), so a gate refuses at once what
cannot start in time; an engine alone ignores it.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp

from kvant_contracts.tenancy import DEADLINE_HEADER

MAX_REQUESTS = 20000  # a bound on any schedule, whatever rate and window are asked for
# A refusal slower than this was not decided at arrival (issue #38 asks every refusal under it).
SLOW_REFUSAL_SECONDS = 0.05


@dataclass(frozen=True)
class Slo:
    ttft_seconds: float
    tpot_seconds: float


@dataclass(frozen=True)
class OpenLoopShape:
    rate: float  # requests per second, on average
    seconds: float  # the sending window
    new_tokens: int  # every answer runs to exactly this many tokens (SGLang's min_new_tokens)
    texts: tuple[str, ...]  # request N sends "N texts[N % len]"
    slo: Slo
    seed: int = 0
    drain_seconds: float = 20.0
    send_deadline: bool = True  # the TTFT budget as the gate's deadline header
    api_key: str | None = None  # sent as `Authorization: Bearer`, as OpenAI-compatible clients do
    # The model each request names: a router (smg) in its multi-model mode routes /generate by it.
    model: str = ""

    def schedule(self) -> list[float]:
        """Arrival times in seconds from the start: exponential gaps at `rate`, seeded."""
        rng = random.Random(self.seed)
        times: list[float] = []
        now = rng.expovariate(self.rate)
        while now < self.seconds and len(times) < MAX_REQUESTS:
            times.append(now)
            now += rng.expovariate(self.rate)
        return times

    def body(self, number: int) -> dict[str, object]:
        text = f"{number % 10**8:08d} {self.texts[number % len(self.texts)]}"
        sampling = {"max_new_tokens": self.new_tokens, "min_new_tokens": self.new_tokens}
        body: dict[str, object] = {"text": text, "sampling_params": sampling, "stream": True}
        if self.model:
            body["model"] = self.model
        return body


@dataclass
class Outcome:
    status: int = 0  # 0: no answer (cut at the end of the drain, or a connection error)
    sent_at: float = 0.0
    first_at: float | None = None  # the first token's arrival
    answered_at: float | None = None  # the answer's end (or the refusal's arrival)
    tokens: int = 0

    @property
    def ttft(self) -> float | None:
        return None if self.first_at is None else self.first_at - self.sent_at

    @property
    def tpot(self) -> float | None:
        if self.first_at is None or self.answered_at is None or self.tokens < 2:
            return None
        return (self.answered_at - self.first_at) / (self.tokens - 1)


@dataclass
class OpenLoopResult:
    shape: OpenLoopShape
    outcomes: list[Outcome] = field(default_factory=list)

    def is_good(self, outcome: Outcome) -> bool:
        slo = self.shape.slo
        ttft, tpot = outcome.ttft, outcome.tpot
        return (
            outcome.status == 200
            and outcome.tokens == self.shape.new_tokens
            and ttft is not None
            and ttft <= slo.ttft_seconds
            and (tpot is None or tpot <= slo.tpot_seconds)
        )

    @property
    def good_tokens(self) -> int:
        return sum(o.tokens for o in self.outcomes if self.is_good(o))

    @property
    def goodput(self) -> float:
        """Good output tokens per second of the sending window."""
        return self.good_tokens / self.shape.seconds

    @property
    def completed_tokens(self) -> int:
        """Output tokens of every request that answered whole, late or not."""
        return sum(o.tokens for o in self.outcomes if o.status == 200 and o.tokens == self.shape.new_tokens)

    @property
    def statuses(self) -> Counter[int]:
        return Counter(o.status for o in self.outcomes)

    def refusal_seconds(self) -> list[float]:
        """How long each refusal (429, 503) took to arrive."""
        return [
            o.answered_at - o.sent_at
            for o in self.outcomes
            if o.status in (429, 503) and o.answered_at is not None
        ]

    def summary(self) -> dict[str, object]:
        ttfts = sorted(t for o in self.outcomes if o.status == 200 and (t := o.ttft) is not None)
        refusals = sorted(self.refusal_seconds())
        whole = [o for o in self.outcomes if o.status == 200 and o.tokens == self.shape.new_tokens]
        return {
            "sent": len(self.outcomes),
            "good": sum(self.is_good(o) for o in self.outcomes),
            "goodput": round(self.goodput, 1),
            "completed_tokens": self.completed_tokens,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "ttft_p50_s": round(statistics.median(ttfts), 3) if ttfts else None,
            "refusal_p99_ms": round(1000 * _quantile(refusals, 0.99), 1) if refusals else None,
            # Why a request was not good, so a goodput gap can be read from the run itself.
            "slow_refusals": sum(seconds > SLOW_REFUSAL_SECONDS for seconds in refusals),
            "late_first_token": sum(1 for o in whole if (o.ttft or 0.0) > self.shape.slo.ttft_seconds),
            "slow_decode": sum(1 for o in whole if (o.tpot or 0.0) > self.shape.slo.tpot_seconds),
        }


async def _one(
    session: aiohttp.ClientSession, url: str, shape: OpenLoopShape, number: int, out: Outcome
) -> None:
    headers = {DEADLINE_HEADER: str(int(shape.slo.ttft_seconds * 1000))} if shape.send_deadline else {}
    if shape.api_key is not None:
        headers["Authorization"] = f"Bearer {shape.api_key}"
    out.sent_at = time.monotonic()
    try:
        async with session.post(url, json=shape.body(number), headers=headers) as response:
            if response.status != 200:
                await response.read()
                out.status, out.answered_at = response.status, time.monotonic()
                return
            async for line in response.content:
                if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                    continue
                tokens = int(json.loads(line[5:])["meta_info"]["completion_tokens"])
                if tokens > 0 and out.first_at is None:
                    out.first_at = time.monotonic()
                out.tokens = tokens
            out.status, out.answered_at = 200, time.monotonic()
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError):
        out.status = 0


async def run_open_loop(base_url: str, shape: OpenLoopShape) -> OpenLoopResult:
    """Sends the schedule to `{base_url}/generate`; returns when every request answered or was cut."""
    result = OpenLoopResult(shape)
    start = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=shape.seconds + shape.drain_seconds)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        tasks = []
        for number, at in enumerate(shape.schedule()):
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            outcome = Outcome()
            result.outcomes.append(outcome)
            tasks.append(asyncio.create_task(_one(session, f"{base_url}/generate", shape, number, outcome)))
        remaining = start + shape.seconds + shape.drain_seconds - time.monotonic()
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, remaining)) if tasks else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return result


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
