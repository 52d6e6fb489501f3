"""The gate's three background loops.

- Limits: put in force what the limits sources offer (the mounted file, polled every `interval`,
  and the limits ConfigMap through the API when the pod has access), as `LimitsArbiter` decides
  between them. Every document goes through the one contract parser; a bad or unreadable one is
  logged once and the last good limits stay in force.
- Local fast loop, one tick every `interval` seconds (~1 s): read the engine's `/metrics`, learn its
  KV capacity, and move the effective concurrency one AIMD step (see `concurrency`).
- Engine load, every `LOAD_POLL_SECONDS` while anything is held or queued (`LOAD_IDLE_SECONDS`
  otherwise): read the engine's `/v1/loads` snapshot into the admission's room (`engine_load`), which
  `engine` admission acts on. A read that fails leaves the last snapshot to go stale (`admit.room`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

import aiohttp

from kvant_contracts.limits import Limits, LimitsError, parse_limits_text
from kvant_runtime.gate.admission import Admission
from kvant_runtime.gate.concurrency import Change, ConcurrencyController, EngineSample
from kvant_runtime.gate.engine_load import EngineLoadError, fetch_loads
from kvant_runtime.gate.engine_metrics import EngineMetricsError, fetch_engine_sample, fetch_token_capacity
from kvant_runtime.gate.forecast import OutputForecast
from kvant_runtime.gate.gate_metrics import GateMetrics
from kvant_runtime.gate.limits_source import ORIGINS, LimitsArbiter, LimitsSource, LimitsText, Origin

log = logging.getLogger("kvant.gate")
_SOURCE_RESTART_SECONDS = 1.0
# SGLang answers /v1/loads from shared memory and publishes a new snapshot on every prefill batch and
# every 15 decode steps (0.15-0.5 s on a GPU): reading every 50 ms while there is traffic follows it
# at 20 small GETs a second to the engine's HTTP process, none to its scheduler.
LOAD_POLL_SECONDS = 0.05
LOAD_IDLE_SECONDS = 0.5
_LOAD_READ_TIMEOUT = 1.0


class LimitsFollower:
    """Applies the limits the arbiter puts in force; reports each new problem once."""

    def __init__(self, first_file: bytes, apply: Callable[[Limits], None], metrics: GateMetrics) -> None:
        """`first_file`: the limits file's content the gate started with (and has in force)."""
        self._arbiter = LimitsArbiter(first_file)
        self._in_force = first_file
        self._apply, self._metrics = apply, metrics
        self._last_error = ""
        self._mark_source("file")

    def offer(self, text: LimitsText) -> None:
        chosen = self._arbiter.offer(text)
        if chosen is None:
            return
        if chosen.content is None:
            self._reject(chosen.problem)
            return
        if chosen.content == self._in_force:  # confirmed by this source: the limits are current
            self._mark_source(chosen.origin)
            self._valid()
            return
        try:
            limits = parse_limits_text(chosen.content, chosen.where)
        except LimitsError as err:
            self._reject(str(err))
            return
        self._apply(limits)
        self._in_force = chosen.content
        log.info("event=limits_reloaded source=%s from=%r limits=%s", chosen.origin, chosen.where, limits)
        self._metrics.limits_reloads.labels("ok").inc()
        self._mark_source(chosen.origin)
        self._valid()

    def _reject(self, error: str) -> None:
        if error != self._last_error:
            log.error("event=limits_rejected keeping=last_good error=%s", error)
            self._metrics.limits_reloads.labels("error").inc()
            self._metrics.limits_valid.set(0)
        self._last_error = error

    def _valid(self) -> None:
        self._metrics.limits_valid.set(1)
        self._last_error = ""

    def _mark_source(self, origin: Origin) -> None:
        for name in ORIGINS:
            self._metrics.limits_source.labels(name).set(1 if name == origin else 0)


async def watch_limits(sources: Sequence[LimitsSource], follower: LimitsFollower) -> None:
    """Forever: every source offers what it reads to `follower`."""
    await asyncio.gather(*(_keep_following(source, follower) for source in sources))


async def _keep_following(source: LimitsSource, follower: LimitsFollower) -> None:
    while True:
        try:
            await source.follow(follower.offer)
        except Exception:
            # A bug here must not stop the limits from following for the pod's lifetime: say so, go on.
            log.exception("event=limits_source_error source=%s", type(source).__name__)
        await asyncio.sleep(_SOURCE_RESTART_SECONDS)


class LocalLoop:
    """Engine metrics → effective concurrency, one AIMD step per tick."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        upstream: str,
        *,
        admission: Admission,
        controller: ConcurrencyController,
        metrics: GateMetrics,
        interval: float,
        forecast: OutputForecast | None = None,
    ) -> None:
        self.forecast = forecast or OutputForecast()
        self.session = session
        self.upstream = upstream.rstrip("/")
        self.admission = admission
        self.controller = controller
        self.metrics = metrics
        self.interval = interval
        self._stale = False
        self._retracted_seen = -1.0  # the engine's retraction counter at the last tick; -1: not yet read

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:
                # A bug here must not freeze the limit for the pod's lifetime: say so, keep ticking.
                log.exception("event=local_loop_error")
            await asyncio.sleep(self.interval)

    async def tick(self) -> None:
        sample = await self._read_sample()
        await self._learn_capacity(sample)
        change = self.controller.step(sample, time.monotonic(), self.admission.in_flight)
        if change is not None:
            self.apply(change)
        self._correct_forecast(sample)

    def _correct_forecast(self, sample: EngineSample | None) -> None:
        """The same signals tell whether the output forecast proved short (see `forecast`)."""
        retracted = sample is not None and sample.retracted_total > self._retracted_seen >= 0
        if sample is not None:
            self._retracted_seen = sample.retracted_total  # a restarted engine's counter starts over
        capacity, budget = self.admission.token_capacity, self.admission.token_budget
        held = sample.token_usage * capacity if sample is not None and capacity else None
        self.forecast.correct(
            stale=sample is None,
            retracted=retracted,
            held=held,
            reserved=self.admission.in_flight_tokens,
            slack=(capacity - budget) if capacity and budget is not None else 0,
        )

    def apply(self, change: Change) -> None:
        self.admission.set_concurrency(change.new)
        self.metrics.concurrency_changes.labels(change.direction, change.signal).inc()
        level = logging.INFO if change.signal == "healthy" else logging.WARNING
        log.log(
            level, "event=concurrency_%s signal=%s reason=%r", change.direction, change.signal, change.reason
        )

    async def _read_sample(self) -> EngineSample | None:
        timeout = max(1.0, self.interval)
        try:
            sample = await fetch_engine_sample(self.session, self.upstream, timeout)
        except EngineMetricsError as err:
            if not self._stale:
                log.warning("event=engine_metrics_stale counted_as=saturated error=%s", err)
            self._stale = True
            self.metrics.engine_metrics_stale.set(1)
            return None
        if self._stale:
            log.info("event=engine_metrics_fresh token_usage=%.3f", sample.token_usage)
        self._stale = False
        self.metrics.engine_metrics_stale.set(0)
        self.metrics.engine_token_usage.set(sample.token_usage)
        return sample

    async def _learn_capacity(self, sample: EngineSample | None) -> None:
        capacity = sample.max_total_num_tokens if sample is not None else None
        if capacity is None and self.admission.token_capacity is None:
            capacity = await fetch_token_capacity(self.session, self.upstream, max(1.0, self.interval))
        if capacity is not None and capacity != self.admission.token_capacity:
            log.info("event=engine_capacity max_total_num_tokens=%d", capacity)
            self.admission.set_token_capacity(capacity)


class EngineLoadLoop:
    """The engine's `/v1/loads` → the admission's room."""

    def __init__(self, session: aiohttp.ClientSession, upstream: str, admission: Admission) -> None:
        self.session = session
        self.upstream = upstream.rstrip("/")
        self.admission = admission
        self._failing = False

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("event=engine_load_error")
            busy = self.admission.in_flight or self.admission.queue_length
            await asyncio.sleep(LOAD_POLL_SECONDS if busy else LOAD_IDLE_SECONDS)

    async def tick(self) -> None:
        try:
            load = await fetch_loads(self.session, self.upstream, _LOAD_READ_TIMEOUT, time.monotonic())
        except EngineLoadError as err:
            if not self._failing:
                log.warning("event=engine_load_unreadable counted_as=saturated_when_stale error=%s", err)
            self._failing = True
            return
        if self._failing:
            log.info("event=engine_load_readable running=%d waiting=%d", load.running, load.waiting)
        self._failing = False
        self.admission.set_engine_load(load)
