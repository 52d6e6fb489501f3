"""The soak's load: kvant_dev.loadgen's closed loop, with each request's start, end and answer kept,
so a window's losses can be placed in time (before or after its model was whole again).

Every URL is checked before the first request: only loopback and the local cluster's test range
(198.18.0.0/15, where its Services, pods and host link live) are ever sent to.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp

from kvant_dev.loadgen import LoadShape

LOCAL_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("198.18.0.0/15"))
REQUEST_TIMEOUT = 30.0  # seconds: past it a request is "hung" (the gate's queue timeout is 10 s)
ERROR_PAUSE = 0.2  # seconds a client waits after a failed connection, so a refused port is not hammered
DOCUMENTED = {200, 429, 503, 408}  # docs/concepts/admission.md: an answer, or a clear refusal


class NotLocalError(ValueError):
    """A URL outside loopback and the local cluster's range: the soak sends nothing there."""


def check_local(url: str) -> str:
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise NotLocalError(f"{url}: the soak only sends to IP addresses, not to {host!r}") from None
    if not any(address in network for network in LOCAL_NETWORKS):
        raise NotLocalError(f"{url}: {address} is outside loopback and 198.18.0.0/15; not sent")
    return url


@dataclass(frozen=True)
class Request:
    started: float  # time.monotonic()
    ended: float
    status: int | None  # None: no answer (a dropped or refused connection, or past REQUEST_TIMEOUT)

    @property
    def lost(self) -> bool:
        return self.status not in DOCUMENTED

    @property
    def hung(self) -> bool:
        return self.status is None and self.ended - self.started >= REQUEST_TIMEOUT


@dataclass
class Window:
    """One window's load on one model: every request, in the order they ended."""

    requests: list[Request] = field(default_factory=list)

    @property
    def non_200(self) -> int:
        return sum(r.status != 200 for r in self.requests)

    def lost(self, started_after: float = 0.0) -> int:
        return sum(r.lost for r in self.requests if r.started >= started_after)

    def outcome(self) -> str:
        codes: dict[str, int] = {}
        for r in self.requests:
            key = "hung" if r.hung else str(r.status or "no answer")
            codes[key] = codes.get(key, 0) + 1
        return " ".join(f"{code}:{n}" for code, n in sorted(codes.items()))


async def _client(
    session: aiohttp.ClientSession,
    url: str,
    shape: LoadShape,
    numbers: Iterator[int],
    *,
    deadline: float,
    out: Window,
) -> None:
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    while time.monotonic() < deadline:
        body: dict[str, object] = {"text": shape.prompt(next(numbers)), "sampling_params": shape.sampling()}
        if shape.model:
            body["model"] = shape.model
        started, status, pause = time.monotonic(), None, 0.0
        try:
            async with session.post(f"{url}/generate", json=body, timeout=timeout) as response:
                await response.read()
                status = response.status
                if status in (429, 503):
                    pause = float(response.headers.get("Retry-After", "1")) / 4
        except (aiohttp.ClientError, TimeoutError):
            pause = ERROR_PAUSE
        out.requests.append(Request(started, time.monotonic(), status))
        await asyncio.sleep(pause)


async def _run(targets: dict[str, tuple[str, LoadShape]], out: dict[str, Window]) -> None:
    async with aiohttp.ClientSession() as session:
        clients = []
        for name, (url, shape) in targets.items():
            deadline, numbers = time.monotonic() + shape.seconds, itertools.count()
            clients += [
                _client(session, url, shape, numbers, deadline=deadline, out=out[name])
                for _ in range(shape.clients)
            ]
        await asyncio.gather(*clients)


def start_load(targets: dict[str, tuple[str, LoadShape]]) -> tuple[threading.Thread, dict[str, Window]]:
    """Starts one closed loop per model (name -> its Service URL and shape) in a background thread;
    returns the thread and the windows it fills. Each client stops sending at its shape's `seconds`,
    and its last request ends within REQUEST_TIMEOUT after that."""
    for url, _ in targets.values():
        check_local(url)
    out = {name: Window() for name in targets}
    thread = threading.Thread(target=lambda: asyncio.run(_run(targets, out)), name="soak-load", daemon=True)
    thread.start()
    return thread, out
