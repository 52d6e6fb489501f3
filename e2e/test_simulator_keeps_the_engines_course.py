"""The simulator held to the real SGLang engine (issue #39): one short trace through both agrees.

The simulator stands in for every result a CPU cannot produce (FP8, INT4, scale), so its scheduler
must keep SGLang's course. SGLang 0.5.23 itself (the local cluster's engine image, CPU backend) serves
the tiny chat model with a 4,096-token cache on loopback, alone on the last CPU (bench/real_engine.py,
launched as a serving pod launches it). First a CPU profile for the simulator's cost model is fitted to
it (bench/protection/cpu_profile.py), so both run on one clock. Then the bench's spread trace (64
closed-loop clients x 8 prose requests of exactly 96 new tokens, their first requests about 20 ms
apart) runs on the engine three times, with gaps of 18, 20 and 22 ms, for its range, and four times
across the same gaps on `kvant sim` with the model's tokenizer, the same cache and batch bound and the
fitted profile, whose mean is compared.
Both engines' state is read from their `/v1/loads` snapshots, which both publish at the same moments
(`real_engine._engine_sample` says why not from SGLang's /metrics gauges).
Held to issue #39's bands (bench/protection/sim_course.py): token usage, its mean and each quarter,
the largest running batch and retractions within 15 % of the engine's range, the first retraction
within 0.15 of the requests done, the trace's time and median latency within 35 %.

It fails where the simulator's admission departs from SGLang's: a simulator whose running requests
reserve nothing of their remaining output and whose full batch admits again at once ran batches of
64 and retracted 402-424 times where the engine retracted 10-18 (bench/README.md, 2026-12-06), and
`--new-token-ratio 0` alone runs a batch of 50-52 where the engine runs 40-43 (the band is 15 %).

Not compared here: the burst trace (every first request at once). On one CPU the engine's tokenizer
process takes a burst in one request at a time beside its scheduler, so its cache fills more slowly
for the first quarter than the simulator's, which admits what fits at once (bench/README.md, "The
simulator beside the real engine"); a GPU server's frontend runs on other cores. 5-6 minutes on the
2-core machine (ten runs of 2026-12-06: 291-364 s).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from bench.protection import cpu_profile
from bench.protection.real_engine import (
    MAX_RUNNING,
    SPREAD_SECONDS,
    fixed_run,
    flush,
    kv_bytes_per_token,
    simulator,
    split_cpus,
)
from bench.protection.sim_course import compare
from bench.real_engine import real_engine

from kvant_dev.tinychat import ensure_tiny_chat_model

# In the default `make test` since 2026-12-06: ten runs in a row within every band (bench/README.md,
# "The simulator beside the real engine"), after the engine's runs began to sample the trace's gaps
# (below); before that, two of fourteen had failed on the retraction count.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

KV_TOKENS = 4096
CLIENTS, PER_CLIENT = 64, 8
# One short trace's retraction count hangs on when each closed-loop client's next request meets a
# step: in virtual time (no real timing at all) the simulator retracts 8 to 18 times as the first
# requests' gap moves within 18-22 ms, and the engine's own three runs of one life have ranged 8-18
# on one day and repeated 10, 10, 10 on another. A band around three repeats judged the simulator by
# a spread the trace does not have. So each engine samples the trace's neighbourhood: the engine at
# three gaps across 18-22 ms (its range), the simulator at four across the same (their mean).
ENGINE_STAGGERS = (0.018, SPREAD_SECONDS, 0.022)
SIMULATOR_STAGGERS = (0.018, 0.0193, 0.0207, 0.022)
MEASURES = (
    "token_usage_mean",
    "largest_running_batch",
    "retractions",
    "first_retraction_at_share_done",
    "seconds",
    "latency_median_s",
)


def test_the_simulator_keeps_the_real_engines_course(tmp_path: Path) -> None:
    model = ensure_tiny_chat_model()
    mine = os.sched_getaffinity(0)
    try:
        engine_cpus = split_cpus()  # this process (clients, simulator) off the engine's CPU
        with real_engine(model, KV_TOKENS, tmp_path, MAX_RUNNING, cpus=engine_cpus) as engine:
            profile, _ = asyncio.run(cpu_profile.fit(engine, kv_bytes_per_token(model)))
            flags = tuple(profile.sim_flags(kv_bytes_per_token(model)))
            # A first run after the fit admits a batch larger than any it has seen more slowly: the
            # bench warms the engine with its burst trace first, and so does this.
            flush(engine)
            asyncio.run(fixed_run(engine, CLIENTS, PER_CLIENT))
            real = []
            for stagger in ENGINE_STAGGERS:
                flush(engine)
                real.append(_spread(engine, stagger))
        with simulator(model, KV_TOKENS, flags) as sim:
            simulated = [_spread(sim, stagger) for stagger in SIMULATOR_STAGGERS]
    finally:
        os.sched_setaffinity(0, mine)
    report = {"profile": profile, "engine": real, "simulator": simulated}
    print(report)
    assert all(run["retractions"] > 0 for run in real), f"the trace must make the engine retract: {report}"
    assert compare(real, _mean_run(simulated)) == [], report


def _spread(url: str, stagger_s: float) -> dict[str, Any]:
    return asyncio.run(fixed_run(url, CLIENTS, PER_CLIENT, stagger_s))


def _mean_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The simulator's runs averaged: what sim_course compares, their spread over the gaps reduced."""

    def mean(values: list[float | None]) -> float | None:
        return None if None in values else sum(v for v in values if v is not None) / len(values)

    averaged: dict[str, Any] = {key: mean([run[key] for run in runs]) for key in MEASURES}
    averaged["token_usage_by_quarter"] = [
        mean([run["token_usage_by_quarter"][quarter] for run in runs]) for quarter in range(4)
    ]
    return averaged
