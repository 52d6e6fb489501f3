"""`GET /v1/loads` as SGLang 0.5.23 serves it: a snapshot the scheduler publishes, not a live read.

SGLang's scheduler writes its load to shared memory on every prefill batch, every
`--load-snapshot-publish-interval` decode steps (15 by default) and when it goes idle; the HTTP
process answers `/v1/loads` from that copy (../shared/reference/sglang-0.5.23-facts.md §2). The
simulator publishes at the same moments, so a gate reading it sees the same lag it would see on
SGLang. A stand-in for SGLang's endpoint, serving only the core fields (`include=core`).
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from aiohttp import web

from kvant_runtime.sim.engine import Engine

PUBLISH_INTERVAL = 15  # SGLang's --load-snapshot-publish-interval


class LoadSnapshots:
    def __init__(self, engine: Engine, version: str) -> None:
        self.engine = engine
        self.version = version
        self._decodes = 0
        self.current: dict[str, Any] = {}  # the published load
        self.publish()

    def after_step(self, kind: str | None) -> None:
        """After a step of `kind` ("prefill", "decode"), or None when the engine went idle."""
        if kind == "decode":
            self._decodes += 1
            if self._decodes % PUBLISH_INTERVAL:
                return
        self.publish()

    def publish(self) -> None:
        engine = self.engine
        capacity = engine.config.kv_tokens
        waiting_tokens = sum(r.prompt_tokens + len(r.output_ids) for r in engine.waiting)
        self.current = {
            "timestamp": time.time(),  # SGLang's LoadSnapshot.timestamp: the scheduler's publish time
            "dp_rank": 0,
            "num_running_reqs": len(engine.running),
            "num_waiting_reqs": len(engine.waiting),
            "num_used_tokens": engine.used_kv_tokens,
            "num_total_tokens": engine.used_kv_tokens + waiting_tokens,
            "max_total_num_tokens": capacity,
            "max_running_requests": engine.config.max_running_requests,
            "token_usage": round(engine.used_kv_tokens / capacity, 4),
        }

    async def serve(self, _request: web.Request) -> web.Response:
        body = {"timestamp": _now(), "version": self.version, "loads": [self.current]}
        return web.json_response(body)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()
