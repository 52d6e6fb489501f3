"""A tiny API server for one ConfigMap, answering what kube-apiserver answers to a LIST and a WATCH
with `fieldSelector=metadata.name=NAME`: a ConfigMapList, then newline-delimited watch events replayed
from the asked resourceVersion, and 410 (an ERROR event) for a version compacted away.

It tests the gate's client against the protocol, including answers a real server gives only under
failure (a compaction, an outage, a broken body). The real apiserver is in the integration and e2e
tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from kvant_contracts.kube_object import Obj
from kvant_contracts.limits import LIMITS_FILE
from kvant_runtime.gate.limits_watch import ApiServer, LimitsConfigMap
from tests.unit.gate_harness import serving


class ConfigMapApi:
    """One namespace with one ConfigMap (or none); `put`, `delete`, `compact` and `fail` change it."""

    def __init__(self, token_file: Path, namespace: str = "serving", name: str = "tiny-limits") -> None:
        self.namespace, self.name = namespace, name
        self.token = "gate-token"
        token_file.write_text(self.token + "\n")
        self.token_file = token_file
        self.version = 100
        self.data: dict[str, str] | None = None
        self.compacted = 0  # a watch from a version below this one gets 410
        self.status = 200  # anything else: every request is answered with it
        self.requests: list[dict[str, str]] = []  # the query of every request, in order
        self._events: list[tuple[int, bytes]] = []
        self._watches: list[asyncio.Queue[bytes | None]] = []
        self.url = ""

    def target(self) -> LimitsConfigMap:
        return LimitsConfigMap(ApiServer(self.url, token_file=self.token_file), self.namespace, self.name)

    def put(self, text: str) -> None:
        """Writes the ConfigMap's limits key; open watches get ADDED or MODIFIED."""
        kind = "ADDED" if self.data is None else "MODIFIED"
        self.version += 1
        self.data = {LIMITS_FILE: text}
        self._send(self.version, _line({"type": kind, "object": self.configmap()}))

    def delete(self) -> None:
        self.version += 1
        gone = self.configmap()
        self.data = None
        self._send(self.version, _line({"type": "DELETED", "object": gone}))

    def send_raw(self, line: bytes) -> None:
        """Bytes as they are, to every open watch (a broken or oversized event)."""
        for queue in self._watches:
            queue.put_nowait(line)

    def compact(self) -> None:
        """Every version before the current one is compacted away: open watches get 410 and end, as
        does a new one from an older version."""
        self.compacted = self.version
        self._events.clear()
        for queue in self._watches:
            queue.put_nowait(_gone(self.version))
            queue.put_nowait(None)

    def fail(self, status: int) -> None:
        """From now on every request gets `status`, and open watches end (an outage)."""
        self.status = status
        for queue in self._watches:
            queue.put_nowait(None)

    def configmap(self) -> Obj:
        meta = {"name": self.name, "namespace": self.namespace, "resourceVersion": str(self.version)}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": self.data or {}}

    def lists(self) -> int:
        return sum(1 for query in self.requests if "watch" not in query)

    def watches(self) -> list[dict[str, str]]:
        return [query for query in self.requests if "watch" in query]

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(f"/api/v1/namespaces/{self.namespace}/configmaps", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(dict(request.query))
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _status(401, "Unauthorized")
        if self.status != 200:
            return _status(self.status, "the server is currently unable to handle the request")
        if request.query.get("fieldSelector") != f"metadata.name={self.name}":
            return _status(403, "configmaps is forbidden: a Role with resourceNames allows one name only")
        if request.query.get("watch") == "true":
            return await self._watch(request)
        items = [self.configmap()] if self.data is not None else []
        listed = {"kind": "ConfigMapList", "apiVersion": "v1", "items": items}
        return web.json_response({**listed, "metadata": {"resourceVersion": str(self.version)}})

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        since = int(request.query["resourceVersion"])
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if since < self.compacted:
            await response.write(_gone(since))
            return response
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        for version, replayed in self._events:
            if version > since:
                queue.put_nowait(replayed)
        self._watches.append(queue)
        try:
            while (line := await queue.get()) is not None:
                await response.write(line)
        finally:
            self._watches.remove(queue)
        return response

    def _send(self, version: int, line: bytes) -> None:
        self._events.append((version, line))
        for queue in self._watches:
            queue.put_nowait(line)


@contextlib.asynccontextmanager
async def configmap_api(token_file: Path) -> AsyncIterator[ConfigMapApi]:
    api = ConfigMapApi(token_file)
    async with serving(api.app()) as url:
        api.url = url
        try:
            yield api
        finally:
            api.fail(503)  # ends open watches, so the server stops at once


def _line(event: Obj) -> bytes:
    return json.dumps(event).encode() + b"\n"


def _gone(version: int) -> bytes:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410}
    return _line({"type": "ERROR", "object": {**status, "message": f"too old resource version: {version}"}})


def _status(code: int, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}
    return web.json_response(body, status=code)
