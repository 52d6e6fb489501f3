"""The engine's own account of its load: SGLang's `GET /v1/loads` (0.5.23), read every few tens of
milliseconds.

SGLang's HTTP process answers it from a shared-memory snapshot the scheduler publishes on every
prefill batch, every `--load-snapshot-publish-interval` decode steps (15 by default), when it goes
idle and every 50 ms of a stall: no round trip to the scheduler, so reading it often costs the engine
microseconds (../shared/reference/sglang-0.5.23-facts.md §2). The snapshot can be about 15 decode steps
old; `engine_queue` is built for that (it counts what the gate let through since, from its own
in-flight account). The simulator serves the same endpoint the same way (`kvant_runtime.sim`).

Across data-parallel ranks the loads add up: requests, tokens used and the cache's size.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp

LOADS_PATH = "/v1/loads"


@dataclass(frozen=True)
class EngineLoad:
    """One snapshot: requests running and waiting in the engine, the KV tokens its running requests
    hold (`num_used_tokens`: what is neither free nor evictable) and the cache's size."""

    running: int
    waiting: int
    used_tokens: int
    capacity: int
    read_at: float  # on the gate's monotonic clock
    # When the engine published it, on the same clock (the oldest rank's): what the gate let through or
    # got back after that is not in it. The read time when the engine gives no timestamp.
    published_at: float | None = None

    @property
    def as_of(self) -> float:
        return self.read_at if self.published_at is None else self.published_at

    @property
    def free_tokens(self) -> int:
        """Free plus evictable (radix-cached) tokens: what SGLang itself counts as room."""
        return max(0, self.capacity - self.used_tokens)


class EngineLoadError(Exception):
    """`/v1/loads` could not be read or does not say what the gate needs."""


def parse_loads(body: object, read_at: float, wall_now: float | None = None) -> EngineLoad:
    """An `EngineLoad` from `/v1/loads`' JSON; raises EngineLoadError naming what is missing.
    `wall_now`: the wall clock at `read_at`, to place the ranks' timestamps on the gate's clock."""
    loads = body.get("loads") if isinstance(body, Mapping) else None
    if not isinstance(loads, list) or not loads:
        raise EngineLoadError(f"{LOADS_PATH} has no 'loads' list")
    totals = dict.fromkeys(
        ("num_running_reqs", "num_waiting_reqs", "num_used_tokens", "max_total_num_tokens"), 0
    )
    published: list[float] = []
    for rank in loads:
        if not isinstance(rank, Mapping):
            raise EngineLoadError(f"{LOADS_PATH} has a load that is not an object: {rank!r}")
        for name in totals:
            value = rank.get(name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise EngineLoadError(f"{LOADS_PATH} has no count {name!r} (got {value!r})")
            totals[name] += value
        stamp = _wall_seconds(rank.get("timestamp"))
        if stamp is not None and wall_now is not None:
            published.append(read_at - max(0.0, wall_now - stamp))
    if totals["max_total_num_tokens"] <= 0:
        raise EngineLoadError(f"{LOADS_PATH} reports max_total_num_tokens 0")
    return EngineLoad(
        running=totals["num_running_reqs"],
        waiting=totals["num_waiting_reqs"],
        used_tokens=totals["num_used_tokens"],
        capacity=totals["max_total_num_tokens"],
        read_at=read_at,
        published_at=min(published) if published else None,
    )


def _wall_seconds(value: object) -> float | None:
    """A load's timestamp as seconds since the epoch: SGLang 0.5.23 publishes `time.time()` at the
    scheduler (`LoadSnapshot.timestamp`; the answer's own top-level timestamp is ISO 8601 and the time
    of the answer, not of the snapshot). ISO 8601 is read too. None when absent or unreadable."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.UTC)
    return stamp.timestamp()


async def fetch_loads(
    session: aiohttp.ClientSession, upstream: str, timeout: float, now: float
) -> EngineLoad:
    """One read of `{upstream}/v1/loads`; raises EngineLoadError on any failure."""
    url = f"{upstream}{LOADS_PATH}?include=core"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                raise EngineLoadError(f"GET {url} answered HTTP {resp.status}")
            body = json.loads(await resp.read())
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        raise EngineLoadError(f"GET {url} failed: {err!r}") from err
    return parse_loads(body, now, time.time())
