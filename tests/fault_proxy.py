"""A fault-injecting TCP proxy for downloader fault tests.

Tests put `FaultProxy` between an HTTP client and a real server (SeaweedFS S3, a Hugging Face
endpoint, or a local `http.server`). It forwards bytes both ways unchanged, except that it can:

- cut the next K responses after N body bytes (`cut_after`),
- flip one body byte of the next K responses (`corrupt`),
- limit upstream→client throughput across all connections (`throttle`).

To know where one response ends and the next begins on a keep-alive connection, it reads just
enough HTTP/1.x framing: request lines (to learn which responses answer HEAD) and request
bodies' Content-Length, and each response's status line, headers and Content-Length. Only
responses with a Content-Length body of at least `min_body` bytes are eligible for faults; HEAD,
1xx/204/304 and smaller responses pass untouched and don't consume one.

Limits, by design (the project's clients don't need more):
- A response with `Transfer-Encoding` (chunked) or without Content-Length (body runs to close)
  passes through untouched; since chunk boundaries are not tracked, everything after it on the
  same connection passes through untouched too and is never eligible for faults.
- Likewise a request with `Transfer-Encoding`, or an upgrade (101), stops framing on that
  connection.
- One response gets at most one fault; when both are armed and eligible, the cut wins and the
  corruption waits for the next eligible response.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from dataclasses import dataclass
from types import TracebackType

_READ_SIZE = 64 * 1024
# A head that never ends is not HTTP we understand; stop framing instead of buffering forever.
_MAX_HEAD = 64 * 1024
# Throttled data is sent in slices this long, so the rate holds within a transfer, not just on average.
_THROTTLE_SLICE_SECONDS = 0.05


@dataclass(frozen=True)
class FaultCounts:
    """What the proxy has done so far, so a test can assert a fault actually fired."""

    connections: int
    responses: int  # responses whose framing was understood (HEAD and small ones included)
    cut: int
    corrupted: int
    throttle_sleeps: int
    throttled_bytes: int


@dataclass
class _CutPlan:
    nbytes: int
    times_left: int
    min_body: int
    reset: bool


@dataclass
class _CorruptPlan:
    offset: int
    times_left: int
    min_body: int


@dataclass(frozen=True)
class _Fault:
    """A fault claimed by one response: cut after `cut_at` body bytes, or flip byte `flip_at`."""

    cut_at: int | None = None
    reset: bool = False
    flip_at: int | None = None


class _FaultBook:
    """Armed faults, the throttle and the counters, shared by the test thread and the proxy loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cut: _CutPlan | None = None
        self._corrupt: _CorruptPlan | None = None
        self._rate: float | None = None
        # Monotonic time at which the shared link is free again; pacing reserves slots after it.
        self._link_free_at = 0.0
        self._connections = 0
        self._responses = 0
        self._cut_count = 0
        self._corrupted = 0
        self._throttle_sleeps = 0
        self._throttled_bytes = 0

    def arm_cut(self, plan: _CutPlan | None) -> None:
        with self._lock:
            self._cut = plan

    def arm_corrupt(self, plan: _CorruptPlan | None) -> None:
        with self._lock:
            self._corrupt = plan

    def set_rate(self, bytes_per_second: float | None) -> None:
        with self._lock:
            self._rate = bytes_per_second
            self._link_free_at = 0.0

    def claim(self, body_length: int | None) -> _Fault | None:
        """Counts one framed response; a body of `body_length` bytes may take an armed fault."""
        with self._lock:
            self._responses += 1
            if not body_length:
                return None
            cut = self._cut
            if cut is not None and body_length >= cut.min_body:
                cut.times_left -= 1
                if cut.times_left == 0:
                    self._cut = None
                return _Fault(cut_at=min(cut.nbytes, body_length), reset=cut.reset)
            corrupt = self._corrupt
            if corrupt is not None and body_length >= corrupt.min_body:
                corrupt.times_left -= 1
                if corrupt.times_left == 0:
                    self._corrupt = None
                return _Fault(flip_at=min(corrupt.offset, body_length - 1))
            return None

    def count_connection(self) -> None:
        with self._lock:
            self._connections += 1

    def count_cut(self) -> None:
        with self._lock:
            self._cut_count += 1

    def count_corrupted(self) -> None:
        with self._lock:
            self._corrupted += 1

    def slice_size(self) -> int | None:
        """How many bytes to send per paced slice, or None when unthrottled."""
        with self._lock:
            if self._rate is None:
                return None
            return max(1, min(_READ_SIZE, int(self._rate * _THROTTLE_SLICE_SECONDS)))

    def reserve(self, nbytes: int) -> float:
        """Books `nbytes` on the shared link; returns how long to wait before sending them."""
        with self._lock:
            if self._rate is None:
                return 0.0
            now = time.monotonic()
            start = max(now, self._link_free_at)
            self._link_free_at = start + nbytes / self._rate
            self._throttled_bytes += nbytes
            delay = self._link_free_at - now
            if delay > 0:
                self._throttle_sleeps += 1
            return delay

    def counts(self) -> FaultCounts:
        with self._lock:
            return FaultCounts(
                connections=self._connections,
                responses=self._responses,
                cut=self._cut_count,
                corrupted=self._corrupted,
                throttle_sleeps=self._throttle_sleeps,
                throttled_bytes=self._throttled_bytes,
            )


def _parse_head(head: bytes) -> tuple[list[str], dict[str, str]] | None:
    """Splits a message head into start-line words and lower-cased headers; None if malformed."""
    lines = head.decode("latin-1").split("\r\n")
    start = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            return None
        headers[name.strip().lower()] = value.strip()
    return start, headers


def _content_length(headers: dict[str, str]) -> int | None:
    """The body length, or None when the body is not delimited by Content-Length."""
    if "transfer-encoding" in headers or "content-length" not in headers:
        return None
    try:
        length = int(headers["content-length"])
    except ValueError:
        return None
    return length if length >= 0 else None


class _RequestTracker:
    """Follows client→upstream framing only to learn each request's method, in order."""

    def __init__(self, methods: collections.deque[str]) -> None:
        self._methods = methods
        self._buffer = bytearray()
        self._body_left = 0
        self._lost = False

    def feed(self, data: bytes) -> None:
        while data and not self._lost:
            if self._body_left:
                skipped = min(self._body_left, len(data))
                self._body_left -= skipped
                data = data[skipped:]
                continue
            self._buffer += data
            data = b""
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                self._lost = len(self._buffer) > _MAX_HEAD
                return
            head, data = bytes(self._buffer[: end + 4]), bytes(self._buffer[end + 4 :])
            self._buffer.clear()
            parsed = _parse_head(head)
            if parsed is None:
                self._lost = True
                return
            start, headers = parsed
            self._methods.append(start[0].upper())
            if "transfer-encoding" in headers:
                # Untracked from here on: responses find no method and stop framing too.
                self._lost = True
                return
            self._body_left = _content_length(headers) or 0


class _ResponseFramer:
    """Follows upstream→client framing and applies the fault each response claims."""

    def __init__(self, methods: collections.deque[str], book: _FaultBook) -> None:
        self._methods = methods
        self._book = book
        self._buffer = bytearray()
        self._opaque = False
        # None while reading a head; otherwise the body bytes still to come.
        self._body_left: int | None = None
        self._body_pos = 0
        self._fault: _Fault | None = None

    def feed(self, data: bytes) -> tuple[bytes, _Fault | None]:
        """Returns the bytes to forward, and the fault if the connection must be cut after them."""
        out = bytearray()
        while data:
            if self._opaque:
                out += data
                break
            if self._body_left is None:
                self._buffer += data
                data = b""
                end = self._buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buffer) > _MAX_HEAD:
                        self._opaque = True
                        out += self._buffer
                        self._buffer.clear()
                    break
                head, data = bytes(self._buffer[: end + 4]), bytes(self._buffer[end + 4 :])
                self._buffer.clear()
                out += head
                self._start_response(head)
                if self._fault is not None and self._fault.cut_at == 0:
                    return bytes(out), self._fault
                continue
            take = data[: self._body_left]
            data = data[self._body_left :]
            fault = self._fault
            if fault is not None and fault.flip_at is not None:
                index = fault.flip_at - self._body_pos
                if 0 <= index < len(take):
                    take = take[:index] + bytes([take[index] ^ 0xFF]) + take[index + 1 :]
                    self._book.count_corrupted()
            if fault is not None and fault.cut_at is not None:
                allowed = fault.cut_at - self._body_pos
                if len(take) >= allowed:
                    out += take[:allowed]
                    return bytes(out), fault
            out += take
            self._body_pos += len(take)
            self._body_left -= len(take)
            if self._body_left == 0:
                self._end_response()
        return bytes(out), None

    def _start_response(self, head: bytes) -> None:
        parsed = _parse_head(head)
        if parsed is None or not parsed[0][0].startswith("HTTP/") or len(parsed[0]) < 2:
            self._opaque = True
            return
        start, headers = parsed
        try:
            status = int(start[1])
        except ValueError:
            self._opaque = True
            return
        if 100 <= status < 200:
            # Interim responses answer no request of their own; 101 hands the socket to another protocol.
            self._opaque = status == 101
            return
        if not self._methods:
            # Request framing was lost, so we can't tell a HEAD answer from a body.
            self._opaque = True
            return
        method = self._methods.popleft()
        if method == "HEAD" or status in (204, 304):
            self._book.claim(None)
            return
        length = _content_length(headers)
        if length is None:
            self._opaque = True
            return
        self._fault = self._book.claim(length)
        self._body_left = length
        self._body_pos = 0
        if length == 0:
            self._end_response()

    def _end_response(self) -> None:
        self._body_left = None
        self._fault = None


class FaultProxy:
    """Forwards TCP connections to `upstream`, injecting the faults the test arms.

    Usage::

        with FaultProxy(("127.0.0.1", server_port)) as proxy:
            proxy.cut_after(1000, times=2)
            download(proxy.url + "/model.safetensors")
            assert proxy.counts.cut == 2

    The fault methods may be called at any time from any thread; each call replaces the
    previous plan of its kind.
    """

    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1", port: int = 0) -> None:
        self._upstream = upstream
        self._host = host
        self._port = port
        self._book = _FaultBook()
        self._bound: tuple[str, int] | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        # Only touched on the loop thread.
        self._connections: set[asyncio.Task[None]] = set()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        if self._thread is not None:
            raise RuntimeError("FaultProxy.start() called twice; create a new proxy instead")
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            self._thread.join()
            raise RuntimeError(
                f"fault proxy could not listen on {self._host}:{self._port}: {self._start_error}"
            ) from self._start_error
        return self

    def stop(self) -> None:
        """Closes the listener and every open connection, then joins the proxy thread."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop may have just finished on its own
                loop.call_soon_threadsafe(stopping.set)
        thread.join()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def address(self) -> tuple[str, int]:
        if self._bound is None:
            raise RuntimeError("FaultProxy has no address until start() returns")
        return self._bound

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    # -- faults ------------------------------------------------------------------------------

    def cut_after(self, nbytes: int, times: int = 1, min_body: int = 1, *, reset: bool = False) -> None:
        """Forwards the head and `nbytes` of the body of the next `times` eligible responses, then
        closes both sides. `reset=False` closes the client side with FIN (the client reads exactly
        `nbytes` body bytes, then EOF); `reset=True` sends RST (bytes still in flight may be lost).
        If `nbytes` covers the whole body, the full response is forwarded and then the connection dies.
        """
        _require(nbytes >= 0, f"cut_after(nbytes={nbytes}): nbytes must be >= 0")
        _require(times >= 1, f"cut_after(times={times}): times must be >= 1")
        _require(min_body >= 1, f"cut_after(min_body={min_body}): min_body must be >= 1")
        self._book.arm_cut(_CutPlan(nbytes=nbytes, times_left=times, min_body=min_body, reset=reset))

    def corrupt(self, times: int = 1, min_body: int = 1, offset: int = 0) -> None:
        """XORs with 0xFF the body byte at `offset` (or the last byte of a shorter body) of the next
        `times` eligible responses; every other byte is forwarded unchanged."""
        _require(times >= 1, f"corrupt(times={times}): times must be >= 1")
        _require(min_body >= 1, f"corrupt(min_body={min_body}): min_body must be >= 1")
        _require(offset >= 0, f"corrupt(offset={offset}): offset must be >= 0")
        self._book.arm_corrupt(_CorruptPlan(offset=offset, times_left=times, min_body=min_body))

    def throttle(self, bytes_per_second: float | None) -> None:
        """Limits upstream→client bytes, summed over all connections; None removes the limit."""
        _require(
            bytes_per_second is None or bytes_per_second > 0,
            f"throttle({bytes_per_second}): give a positive rate, or None for unlimited",
        )
        self._book.set_rate(bytes_per_second)

    def clear(self) -> None:
        """Disarms pending cuts and corruptions and removes the throttle; counters are kept."""
        self._book.arm_cut(None)
        self._book.arm_corrupt(None)
        self._book.set_rate(None)

    @property
    def counts(self) -> FaultCounts:
        return self._book.counts()

    # -- the loop thread ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # reported to start() if it happened before listening
            if not self._ready.is_set():
                self._start_error = error
                self._ready.set()
            else:
                raise

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._serve, self._host, self._port)
        host, port = server.sockets[0].getsockname()[:2]
        self._bound = (host, port)
        self._ready.set()
        await self._stopping.wait()
        server.close()
        for task in self._connections:
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await server.wait_closed()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._book.count_connection()
        upstream_writer: asyncio.StreamWriter | None = None
        finished = False
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._upstream)
            methods: collections.deque[str] = collections.deque()
            await asyncio.gather(
                self._pump_requests(client_reader, upstream_writer, client_writer, methods),
                self._pump_responses(upstream_reader, client_writer, upstream_writer, methods),
            )
            finished = True
        except OSError:
            pass  # upstream refused: the client just sees its connection dropped
        finally:
            self._connections.discard(task)
            for writer in (client_writer, upstream_writer):
                if writer is None:
                    continue
                # Both directions ended: close() still flushes what the client has not read yet.
                # Stop and connect errors tear down at once.
                if finished:
                    writer.close()
                else:
                    writer.transport.abort()

    async def _pump_requests(
        self,
        client_reader: asyncio.StreamReader,
        upstream_writer: asyncio.StreamWriter,
        client_writer: asyncio.StreamWriter,
        methods: collections.deque[str],
    ) -> None:
        tracker = _RequestTracker(methods)
        try:
            # Track before forwarding, so a request's method is queued before its response can arrive.
            while data := await client_reader.read(_READ_SIZE):
                tracker.feed(data)
                upstream_writer.write(data)
                await upstream_writer.drain()
            if upstream_writer.can_write_eof():
                upstream_writer.write_eof()
        except OSError:
            client_writer.transport.abort()
            upstream_writer.transport.abort()

    async def _pump_responses(
        self,
        upstream_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        upstream_writer: asyncio.StreamWriter,
        methods: collections.deque[str],
    ) -> None:
        framer = _ResponseFramer(methods, self._book)
        try:
            while data := await upstream_reader.read(_READ_SIZE):
                out, cut = framer.feed(data)
                await self._send(client_writer, out)
                if cut is not None:
                    self._book.count_cut()
                    upstream_writer.transport.abort()
                    if cut.reset:
                        client_writer.transport.abort()
                    else:
                        # close() flushes what was written, then sends FIN: the client sees a short body.
                        client_writer.close()
                        await client_writer.wait_closed()
                    return
            if client_writer.can_write_eof():
                client_writer.write_eof()
        except OSError:
            client_writer.transport.abort()
            upstream_writer.transport.abort()

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        while data:
            size = self._book.slice_size()
            piece, data = (data, b"") if size is None else (data[:size], data[size:])
            delay = self._book.reserve(len(piece)) if size is not None else 0.0
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(piece)
            await writer.drain()


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
