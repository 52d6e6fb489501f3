"""Reads the engine's signals: `/metrics` (Prometheus text) and its server info (JSON).

Across series (tp_rank, dp_rank, …) the series combine as `kvant_contracts.sglang_metrics` says:
the highest token_usage, the smallest max_total_num_tokens, and the retractions of every scheduler
counted once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import aiohttp

from kvant_contracts.sglang_metrics import (
    MAX_TOTAL_NUM_TOKENS,
    NUM_RETRACTED_REQUESTS_TOTAL,
    PREFIX,
    TOKEN_USAGE,
    Series,
    combine,
    retractions_total,
    scheduler_in,
)
from kvant_runtime.gate.concurrency import EngineSample

SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
_WANTED = (TOKEN_USAGE, NUM_RETRACTED_REQUESTS_TOTAL, MAX_TOTAL_NUM_TOKENS)
# `name{labels} value`: the name, the labels, then the value after the last `}` (label values may
# hold spaces).
_SAMPLE = re.compile(rf"({re.escape(PREFIX)}[A-Za-z0-9_:]+)(\{{.*\}})?\s+(\S+)")


class EngineMetricsError(Exception):
    """The engine's metrics could not be read or lack what the gate needs."""


def parse_engine_metrics(text: str) -> EngineSample:
    """Extracts the gate's signals from a `/metrics` body; token_usage is required.

    A line scan for the three series, not the parser every other reader uses
    (`kvant_contracts.prometheus_text`): an engine's `/metrics` runs to thousands of lines, and
    parsing them all would stall the proxy's event loop.
    """
    series: dict[str, list[Series]] = {name: [] for name in _WANTED}
    for line in text.splitlines():
        match = _SAMPLE.match(line) if line.startswith(PREFIX) else None
        if match is None or match[1] not in series:
            continue
        try:
            series[match[1]].append((scheduler_in(match[2] or ""), float(match[3])))
        except ValueError as err:
            raise EngineMetricsError(f"the engine's /metrics has an unreadable value: {line!r}") from err
    token_usage = combine(TOKEN_USAGE, series[TOKEN_USAGE])
    if token_usage is None:
        raise EngineMetricsError(
            f"the engine's /metrics has no {TOKEN_USAGE}; start SGLang with --enable-metrics"
        )
    capacity = combine(MAX_TOTAL_NUM_TOKENS, series[MAX_TOTAL_NUM_TOKENS])
    return EngineSample(
        token_usage=token_usage,
        retracted_total=retractions_total(series[NUM_RETRACTED_REQUESTS_TOTAL]),
        max_total_num_tokens=int(capacity) if capacity is not None else None,
    )


def parse_server_info(info: object) -> int | None:
    """max_total_num_tokens from `/get_server_info`: top level, or the smallest of `internal_states`."""
    if not isinstance(info, Mapping):
        return None
    found = [_positive_int(info.get("max_total_num_tokens"))]
    states = info.get("internal_states")
    if isinstance(states, list):
        found += [_positive_int(s.get("max_total_num_tokens")) for s in states if isinstance(s, Mapping)]
    known = [n for n in found if n is not None]
    return min(known) if known else None


async def fetch_engine_sample(session: aiohttp.ClientSession, upstream: str, timeout: float) -> EngineSample:
    """One scrape of `{upstream}/metrics`; raises EngineMetricsError on any failure."""
    try:
        async with session.get(f"{upstream}/metrics", timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                raise EngineMetricsError(f"GET {upstream}/metrics answered HTTP {resp.status}")
            text = await resp.text()
    except (aiohttp.ClientError, TimeoutError) as err:
        raise EngineMetricsError(f"GET {upstream}/metrics failed: {err!r}") from err
    return parse_engine_metrics(text)


async def fetch_token_capacity(session: aiohttp.ClientSession, upstream: str, timeout: float) -> int | None:
    """max_total_num_tokens from the engine's server info, or None if unavailable.

    `/server_info` is SGLang's current name; `/get_server_info` the older, deprecated one.
    """
    for path in SERVER_INFO_PATHS:
        try:
            async with session.get(f"{upstream}{path}", timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                if resp.status == 200:
                    return parse_server_info(json.loads(await resp.read()))
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
    return None


def _positive_int(value: Any) -> int | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return int(value)
    return None
