"""The gate's watch on its own limits ConfigMap through the API server: a `LimitsSource`.

Written on aiohttp rather than taken from a client library because the gate is one asyncio event
loop that proxies every request: the official `kubernetes` client is synchronous (a watch would hold
a thread and its own connection pool), `kubernetes_asyncio` would add a second generated client of
the whole API to the runtime image for one ConfigMap, and kopf is the operator's. One object, one
resource name, LIST then WATCH: what follows is all of it.

It LISTs with `fieldSelector=metadata.name=<name>` for the current content and a resourceVersion,
then WATCHes from that version the same way. RBAC authorizes a list or watch with that selector
against a Role's `resourceNames`, so the gate's Role names its one ConfigMap and nothing else. A
watch the server ends (it is asked to every WATCH_SECONDS) resumes from the last version seen;
410 Gone (that version was compacted away) re-lists. Failures retry with jittered exponential
backoff, 0.5 s doubling up to 30 s.

In a pod, the API server comes from KUBERNETES_SERVICE_HOST/PORT and the ServiceAccount token and CA
from API_CREDENTIALS_DIR, as client-go's in-cluster config finds them; the token is read again for
every request, because the kubelet rotates it.

Every answer is bounded in time (connect 5 s, a LIST 15 s, a watch silent for WATCH_SECONDS + 30 s
is re-opened) and in size (MAX_BYTES for a LIST body or one watch event; a ConfigMap holds at most
1 MiB). Anything unexpected becomes one log line saying what and where, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from kvant_contracts import backoff
from kvant_contracts.limits import LIMITS_FILE
from kvant_contracts.serving_pod import API_CREDENTIALS_DIR
from kvant_runtime.gate.limits_source import LimitsText, Offer

log = logging.getLogger("kvant.gate")

WATCH_SECONDS = 60
MAX_BYTES = 4 << 20
_CONNECT_SECONDS, _LIST_SECONDS, _SILENCE_GRACE = 5.0, 15.0, 30.0
_ERROR_BODY_BYTES = 64 << 10
_FIRST_RETRY, _LAST_RETRY = 0.5, 30.0


class ApiAccessError(ValueError):
    """The pod lacks what an in-cluster client needs; the message says what."""


class WatchFailed(Exception):
    """One failed LIST or WATCH, said for the person reading the gate's log."""


class _Gone(Exception):
    """410: the resourceVersion to resume from is too old; re-list."""


@dataclass(frozen=True)
class ApiServer:
    """How to reach the API server: its base URL, and the token and CA files (None: not used)."""

    url: str
    token_file: Path | None = None
    ca_file: Path | None = None

    @classmethod
    def in_cluster(
        cls, credentials: Path = Path(API_CREDENTIALS_DIR), env: Mapping[str, str] = os.environ
    ) -> ApiServer:
        host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise ApiAccessError(
                "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: not in a pod?"
            )
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", credentials / "token", credentials / "ca.crt")


@dataclass(frozen=True)
class LimitsConfigMap:
    """The ConfigMap the gate follows, and the API server that has it."""

    api: ApiServer
    namespace: str
    name: str


class ConfigMapWatch:
    """Follows one ConfigMap's `key` through the API; offers its content as a `LimitsText`."""

    def __init__(
        self,
        target: LimitsConfigMap,
        *,
        key: str = LIMITS_FILE,
        max_bytes: int = MAX_BYTES,
        watch_seconds: int = WATCH_SECONDS,
    ) -> None:
        self.target, self.key = target, key
        self.max_bytes, self.watch_seconds = max_bytes, watch_seconds
        self.where = f"ConfigMap {target.namespace}/{target.name}"
        self._url = f"{target.api.url.rstrip('/')}/api/v1/namespaces/{target.namespace}/configmaps"
        self._selector = f"metadata.name={target.name}"
        self._problem: str | None = None  # the last problem logged; "" once synced

    async def follow(self, offer: Offer) -> None:
        failures, gone_again = 0, False  # failures in a row since the last good LIST
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
            while True:
                try:
                    version = await self._list(session, offer)
                    failures = 0
                    while True:
                        version = await self._watch(session, version, offer)
                        gone_again = False
                except _Gone:
                    log.info("event=limits_api_relist configmap=%s reason=410_gone", self.where)
                    if gone_again:  # Gone again at once: a server that keeps saying so gets no busy loop
                        failures += 1
                        await asyncio.sleep(backoff.delay(failures, _FIRST_RETRY, _LAST_RETRY))
                    gone_again = True
                except WatchFailed as err:
                    failures += 1
                    wait = backoff.delay(failures, _FIRST_RETRY, _LAST_RETRY)
                    self._offer(offer, LimitsText("api", self.where, None, str(err)), wait)
                    await asyncio.sleep(backoff.jittered(wait))

    async def _list(self, session: aiohttp.ClientSession, offer: Offer) -> str:
        timeout = aiohttp.ClientTimeout(total=_LIST_SECONDS, sock_connect=_CONNECT_SECONDS)
        async with self._get(session, {"fieldSelector": self._selector}, timeout) as resp:
            what = f"{self.where}: the list answer"
            body = _json(await _read_capped(resp, self.max_bytes, what), what)
        items, version = _field(body, "items"), _version(body)
        if not isinstance(items, list) or version is None:
            raise WatchFailed(f"{self.where}: the API server's list answer is not a ConfigMapList")
        if not items:
            self._offer(offer, LimitsText("api", self.where, None, f"{self.where} does not exist"))
        else:
            self._offer(offer, self._text(items[0]))
        return version

    async def _watch(self, session: aiohttp.ClientSession, version: str, offer: Offer) -> str:
        """One watch from `version`, until the server ends it; returns the last version seen."""
        params = {
            "fieldSelector": self._selector,
            "watch": "true",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_seconds),
        }
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=_CONNECT_SECONDS, sock_read=self.watch_seconds + _SILENCE_GRACE
        )
        async with self._get(session, params, timeout) as resp:
            try:
                async for line in _lines(resp, self.max_bytes, f"{self.where}: a watch event"):
                    version = self._event(line, version, offer)
            except aiohttp.ServerTimeoutError:
                log.debug("event=limits_api_watch_silent configmap=%s reopening=true", self.where)
        return version

    def _event(self, line: bytes, version: str, offer: Offer) -> str:
        event = _json(line, f"{self.where}: a watch event")
        kind, obj = _field(event, "type"), _field(event, "object")
        if kind == "ERROR":
            code, message = _field(obj, "code"), _field(obj, "message")
            if code == 410:
                raise _Gone
            raise WatchFailed(f"{self.where}: the watch ended with error {code}: {message}")
        if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK") or not isinstance(obj, dict):
            raise WatchFailed(f"{self.where}: not a watch event: {_excerpt(line)}")
        new_version = _version(obj)
        if new_version is None:
            raise WatchFailed(f"{self.where}: a {kind} event without a resourceVersion")
        if kind == "BOOKMARK":
            return new_version
        name = _field(_field(obj, "metadata"), "name")
        if name != self.target.name:
            raise WatchFailed(f"{self.where}: the watch sent ConfigMap {name!r}, which it did not ask for")
        if kind == "DELETED":
            self._offer(offer, LimitsText("api", self.where, None, f"{self.where} was deleted"))
        else:
            self._offer(offer, self._text(obj))
        return new_version

    def _text(self, obj: Any) -> LimitsText:
        where = f"{self.where} key {self.key} (resourceVersion {_version(obj)})"
        value = _field(_field(obj, "data"), self.key)
        if not isinstance(value, str):
            return LimitsText("api", where, None, f"{where}: the ConfigMap has no key {self.key!r}")
        return LimitsText("api", where, value.encode())

    def _offer(self, offer: Offer, text: LimitsText, retry: float | None = None) -> None:
        """Offers `text`, logging each new problem once and the return to health."""
        if text.content is None and text.problem != self._problem:
            after = f" retry_in={retry:.1f}s" if retry is not None else ""
            log.warning("event=limits_api_unavailable following=file error=%s%s", text.problem, after)
        elif text.content is not None and self._problem != "":
            log.info("event=limits_api_synced configmap=%s source=%s", self.where, text.where)
        self._problem = text.problem if text.content is None else ""
        offer(text)

    @contextlib.asynccontextmanager
    async def _get(
        self, session: aiohttp.ClientSession, params: dict[str, str], timeout: aiohttp.ClientTimeout
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        headers = {"Accept": "application/json", **self._authorization()}
        try:
            async with session.get(
                self._url, params=params, headers=headers, timeout=timeout, ssl=self._ssl()
            ) as resp:
                if resp.status == 410:
                    raise _Gone
                if resp.status != 200:
                    detail = _status_message(await resp.content.read(_ERROR_BODY_BYTES))
                    hint = ""
                    if resp.status in (401, 403):
                        hint = " (the gate's ServiceAccount needs get, list and watch on this ConfigMap)"
                    raise WatchFailed(f"{self.where}: the API server answered {resp.status}: {detail}{hint}")
                yield resp
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            raise WatchFailed(
                f"{self.where}: the API server at {self.target.api.url} is unreachable or broke off: {err!r}"
            ) from err

    def _authorization(self) -> dict[str, str]:
        token_file = self.target.api.token_file
        if token_file is None:
            return {}
        try:
            token = token_file.read_text().strip()
        except OSError as err:
            raise WatchFailed(
                f"cannot read the ServiceAccount token {token_file}: {err.strerror or err}"
            ) from err
        return {"Authorization": f"Bearer {token}"}

    def _ssl(self) -> ssl.SSLContext | bool:
        ca_file = self.target.api.ca_file
        if ca_file is None:
            return True
        try:
            return ssl.create_default_context(cafile=str(ca_file))
        except (OSError, ssl.SSLError) as err:
            raise WatchFailed(f"cannot read the cluster CA {ca_file}: {err}") from err


async def _read_capped(resp: aiohttp.ClientResponse, limit: int, what: str) -> bytes:
    body = bytearray()
    async for chunk in resp.content.iter_any():
        body += chunk
        if len(body) > limit:
            raise WatchFailed(f"{what} is over {limit} bytes")
    return bytes(body)


async def _lines(resp: aiohttp.ClientResponse, limit: int, what: str) -> AsyncIterator[bytes]:
    """The watch stream's events, one JSON document per line; a line over `limit` bytes fails."""
    pending = bytearray()
    async for chunk in resp.content.iter_any():
        pending += chunk
        while (end := pending.find(b"\n")) >= 0:
            if end > limit:
                raise WatchFailed(f"{what} is over {limit} bytes")
            line = bytes(pending[:end]).strip()
            del pending[: end + 1]
            if line:
                yield line
        if len(pending) > limit:
            raise WatchFailed(f"{what} is over {limit} bytes")
    if pending.strip():
        yield bytes(pending).strip()


def _json(raw: bytes, what: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as err:  # RecursionError: nested deeper than Python parses
        raise WatchFailed(f"{what} is not JSON ({err}): {_excerpt(raw)}") from err


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else None


def _version(obj: Any) -> str | None:
    version = _field(_field(obj, "metadata"), "resourceVersion")
    return version if isinstance(version, str) and version else None


def _status_message(raw: bytes) -> str:
    """A Status object's message, else the start of the body."""
    try:
        message = _field(json.loads(raw), "message")
    except ValueError:
        message = None
    return str(message) if message else _excerpt(raw)


def _excerpt(raw: bytes) -> str:
    text = raw[:200].decode("utf-8", "replace")
    return repr(text + ("…" if len(raw) > 200 else ""))
