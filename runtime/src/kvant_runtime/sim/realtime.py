"""Drives the engine on the event loop's clock for the HTTP server.

Each iteration runs one engine step, sleeps for its simulated duration, then
delivers the step's tokens to the requests' queues. Requests that arrive
during a step wait for the next one, as they would in SGLang.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from kvant_runtime.sim.engine import Engine, Request
from kvant_runtime.sim.load_snapshot import LoadSnapshots
from kvant_runtime.sim.sim_metrics import EngineMetrics


@dataclass(eq=False)
class Stream:
    """One request as its HTTP handler sees it: token ids arrive on `tokens`, then None."""

    request: Request
    is_streaming: bool
    tokens: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)
    on_finish: Callable[[Request], None] | None = None  # a prefill's handoff to its decode


class RealTimeEngine:
    def __init__(self, engine: Engine, metrics: EngineMetrics, version: str = "") -> None:
        self.engine = engine
        self.metrics = metrics
        self.loads = LoadSnapshots(engine, version)  # what GET /v1/loads answers
        self._streams: dict[Request, Stream] = {}
        self._work = asyncio.Event()
        self._ids = itertools.count()

    def submit(
        self,
        prompt_tokens: int,
        max_new_tokens: int,
        prompt_key: str,
        is_streaming: bool,
        *,
        ignore_eos: bool = False,
        kv_transferred: bool = False,
        on_finish: Callable[[Request], None] | None = None,
        adapter: str | None = None,
    ) -> Stream:
        """Queue a request; raises RequestRejected when it could never run."""
        now = asyncio.get_running_loop().time()
        rid = f"sim-{next(self._ids)}"
        request = self.engine.submit(
            rid,
            prompt_tokens,
            max_new_tokens,
            now,
            prompt_key,
            ignore_eos=ignore_eos,
            kv_transferred=kv_transferred,
            adapter=adapter,
        )
        stream = Stream(request, is_streaming, on_finish=on_finish)
        self._streams[request] = stream
        self.metrics.observe_state(self.engine)
        self._work.set()
        return stream

    def abort(self, stream: Stream) -> None:
        if not stream.request.finished:
            self.engine.abort(stream.request)
            self._streams.pop(stream.request, None)
            self.metrics.observe_state(self.engine)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.metrics.start(self.engine, loop.time())
        while True:
            step = self.engine.step(loop.time())
            if step is None:
                self.loads.after_step(None)
                self.metrics.close_interval(loop.time())
                self._work.clear()
                await self._work.wait()
                continue
            await asyncio.sleep(step.duration)
            for request, token in step.tokens:
                if request in self._streams:
                    self._streams[request].tokens.put_nowait(token)
            for request in step.finished:
                stream = self._streams.pop(request, None)
                if stream is not None:
                    self.metrics.observe_finished(request, stream.is_streaming)
                    if stream.on_finish is not None:
                        stream.on_finish(request)
                    stream.tokens.put_nowait(None)
            self.metrics.observe_step(self.engine, step)
            self.loads.after_step(step.kind)
