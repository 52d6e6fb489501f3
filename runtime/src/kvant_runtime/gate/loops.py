"""The gate's two background loops, one tick every `interval` seconds (~1 s).

- Limits reload: re-read the limits file and apply it when its *content* changed. The
  kubelet (and the dev node agent) swaps a `..data` symlink: the mounted path itself never
  changes, and a rewrite within the same second can keep the target's mtime, so the bytes
  are compared. A bad or missing file is logged once and the last good limits stay in force.
- Local fast loop: read the engine's `/metrics`, learn its KV capacity, and move the
  effective concurrency one AIMD step (see `concurrency`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from kvant_contracts.limits import Limits, LimitsError, parse_limits_text
from kvant_runtime.gate.admission import Admission
from kvant_runtime.gate.concurrency import Change, ConcurrencyController, EngineSample
from kvant_runtime.gate.engine_metrics import EngineMetricsError, fetch_engine_sample, fetch_token_capacity
from kvant_runtime.gate.forecast import OutputForecast
from kvant_runtime.gate.gate_metrics import GateMetrics

log = logging.getLogger("kvant.gate")


class LimitsFile:
    """The mounted limits file, read whole each time and compared by content."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._content: bytes | None = None

    def load(self) -> Limits:
        """The first read; raises LimitsError (there are no last good limits yet)."""
        content = self._read()
        limits = parse_limits_text(content, str(self.path))
        self._content = content
        return limits

    def changed(self) -> Limits | None:
        """New limits if the content changed since the last read, else None; raises LimitsError."""
        content = self._read()
        if content == self._content:
            return None
        self._content = content  # remember bad content too, so its error is logged once
        return parse_limits_text(content, str(self.path))

    def _read(self) -> bytes:
        try:
            return self.path.read_bytes()
        except OSError as err:
            raise LimitsError(f"{self.path}: cannot read the limits file: {err.strerror or err}") from err


async def watch_limits(
    limits_file: LimitsFile, apply: Callable[[Limits], None], metrics: GateMetrics, interval: float
) -> None:
    """Forever: apply the limits file whenever its content changes; report each new problem once."""
    last_error = ""
    while True:
        await asyncio.sleep(interval)
        try:
            limits = limits_file.changed()
        except LimitsError as err:
            if str(err) != last_error:
                log.error("event=limits_rejected keeping=last_good error=%s", err)
                metrics.limits_reloads.labels("error").inc()
                metrics.limits_valid.set(0)
            last_error = str(err)
            continue
        if limits is not None:
            apply(limits)
            log.info("event=limits_reloaded file=%s limits=%s", limits_file.path, limits)
            metrics.limits_reloads.labels("ok").inc()
            metrics.limits_valid.set(1)
            last_error = ""


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
        # The same signals correct the output forecast: any pressure widens it, health narrows it.
        target = self.admission.limits.targetTokenUsage
        if (
            sample is None
            or sample.token_usage > target
            or (change is not None and change.direction == "down")
        ):
            self.forecast.pressure()
        else:
            self.forecast.healthy()

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
