"""The fault proxy forwards bytes unchanged and fires exactly the faults a test arms, no more."""

import http.client
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.fault_proxy import FaultProxy

pytestmark = pytest.mark.timeout(30)

TIMEOUT = 5.0
BIG = bytes(i * 7 % 251 for i in range(100_000))
SMALL = b"ten bytes!"
CHUNKED = b"a chunked body that the proxy never frames"
BODIES = {"/big": BIG, "/small": SMALL}


@dataclass
class Upstream:
    address: tuple[str, int]
    # (client address, path) per request, to tell how many upstream connections carried them.
    requests: list[tuple[tuple[str, int], str]] = field(default_factory=list)


def handler_for(upstream: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive
        timeout = TIMEOUT

        # Fixed Date and Server headers, so direct and proxied responses compare byte for byte.
        def date_time_string(self, timestamp=None) -> str:
            return "Thu, 01 Jan 2026 00:00:00 GMT"

        def version_string(self) -> str:
            return "kvant-test"

        def log_message(self, format, *args) -> None:
            pass

        def do_GET(self) -> None:
            self.respond(send_body=True)

        def do_HEAD(self) -> None:
            self.respond(send_body=False)

        def respond(self, send_body: bool) -> None:
            upstream.requests.append((self.client_address, self.path))
            self.send_response(200)
            if self.path == "/chunked":
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if send_body:
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(CHUNKED), CHUNKED))
                return
            body = BODIES[self.path]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body:
                self.wfile.write(body)

    return Handler


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    record = Upstream(address=("127.0.0.1", 0))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(record))
    server.daemon_threads = True
    record.address = ("127.0.0.1", server.server_address[1])
    # A short poll interval keeps shutdown() quick.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield record
    server.shutdown()
    server.server_close()
    thread.join(TIMEOUT)


@pytest.fixture
def proxy(upstream: Upstream) -> Iterator[FaultProxy]:
    with FaultProxy(upstream.address) as running:
        yield running


def connect(proxy: FaultProxy) -> http.client.HTTPConnection:
    host, port = proxy.address
    return http.client.HTTPConnection(host, port, timeout=TIMEOUT)


def fetch(connection: http.client.HTTPConnection, path: str, method: str = "GET") -> bytes:
    connection.request(method, path)
    response = connection.getresponse()
    assert response.status == 200
    return response.read()


def fetch_fresh(proxy: FaultProxy, path: str) -> bytes:
    connection = connect(proxy)
    try:
        return fetch(connection, path)
    finally:
        connection.close()


def raw_exchange(address: tuple[str, int], request: bytes) -> bytes:
    with socket.create_connection(address, timeout=TIMEOUT) as sock:
        sock.sendall(request)
        received = bytearray()
        while chunk := sock.recv(65536):
            received += chunk
        return bytes(received)


def test_pass_through_is_byte_identical(upstream, proxy):
    request = b"GET /big HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    direct = raw_exchange(upstream.address, request)
    proxied = raw_exchange(proxy.address, request)
    assert direct.endswith(BIG)
    assert proxied == direct
    assert proxy.counts.responses == 1


def test_keep_alive_connection_carries_several_responses(upstream, proxy):
    connection = connect(proxy)
    assert fetch(connection, "/big") == BIG
    assert fetch(connection, "/big", method="HEAD") == b""
    assert fetch(connection, "/small") == SMALL
    assert fetch(connection, "/big") == BIG
    connection.close()

    peers = {peer for peer, _ in upstream.requests}
    assert len(upstream.requests) == 4
    assert len(peers) == 1, f"expected one upstream connection, got {peers}"
    counts = proxy.counts
    assert (counts.connections, counts.responses, counts.cut, counts.corrupted) == (1, 4, 0, 0)


def test_many_concurrent_connections_pass_through(proxy):
    with ThreadPoolExecutor(max_workers=8) as pool:
        bodies = list(pool.map(lambda _: fetch_fresh(proxy, "/big"), range(16)))
    assert all(body == BIG for body in bodies)
    assert proxy.counts.connections == 16


def test_cut_after_shortens_exactly_times_responses(proxy):
    proxy.cut_after(1000, times=2)
    for _ in range(2):
        with pytest.raises(http.client.IncompleteRead) as short:
            fetch_fresh(proxy, "/big")
        assert short.value.partial == BIG[:1000]
    assert fetch_fresh(proxy, "/big") == BIG
    assert proxy.counts.cut == 2


def test_cut_after_with_reset_drops_the_connection(proxy):
    proxy.cut_after(1000, reset=True)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        fetch_fresh(proxy, "/big")
    assert fetch_fresh(proxy, "/big") == BIG
    assert proxy.counts.cut == 1


@pytest.mark.parametrize(
    ("offset", "flipped"),
    [(0, 0), (1234, 1234), (70_000, 70_000), (10**9, len(BIG) - 1)],
    ids=["first-byte", "inside", "past-first-read", "beyond-end-flips-last"],
)
def test_corrupt_flips_exactly_one_byte(proxy, offset, flipped):
    proxy.corrupt(offset=offset)
    body = fetch_fresh(proxy, "/big")
    assert len(body) == len(BIG)
    assert [i for i, (got, sent) in enumerate(zip(body, BIG, strict=True)) if got != sent] == [flipped]
    assert body[flipped] == BIG[flipped] ^ 0xFF
    assert fetch_fresh(proxy, "/big") == BIG
    assert proxy.counts.corrupted == 1


@pytest.mark.parametrize("fault", ["cut", "corrupt"])
def test_head_and_small_responses_do_not_consume_a_fault(proxy, fault):
    if fault == "cut":
        proxy.cut_after(10, min_body=1000)
    else:
        proxy.corrupt(min_body=1000)
    connection = connect(proxy)
    assert fetch(connection, "/big", method="HEAD") == b""
    assert fetch(connection, "/small") == SMALL
    assert (proxy.counts.cut, proxy.counts.corrupted) == (0, 0)

    # Same keep-alive connection: framing stayed in step, and the next big body takes the fault.
    if fault == "cut":
        with pytest.raises(http.client.IncompleteRead) as short:
            fetch(connection, "/big")
        assert short.value.partial == BIG[:10]
        assert proxy.counts.cut == 1
    else:
        assert fetch(connection, "/big")[0] == BIG[0] ^ 0xFF
        assert proxy.counts.corrupted == 1
    connection.close()


def test_chunked_response_passes_untouched_and_is_never_faulted(proxy):
    proxy.corrupt()
    connection = connect(proxy)
    assert fetch(connection, "/chunked") == CHUNKED
    # After a chunked body the proxy stops framing this connection, so the fault stays armed.
    assert fetch(connection, "/big") == BIG
    connection.close()
    assert proxy.counts.corrupted == 0
    assert fetch_fresh(proxy, "/big") != BIG
    assert proxy.counts.corrupted == 1


def test_throttle_paces_responses_until_lifted(proxy):
    # 1 MB/s is paced in 50 kB slices: a 100 kB body needs several waits.
    proxy.throttle(1_000_000)
    assert fetch_fresh(proxy, "/big") == BIG
    throttled = proxy.counts
    assert throttled.throttle_sleeps >= 2
    assert throttled.throttled_bytes > len(BIG)  # the head is paced too

    proxy.throttle(None)
    assert fetch_fresh(proxy, "/big") == BIG
    lifted = proxy.counts
    assert (lifted.throttle_sleeps, lifted.throttled_bytes) == (
        throttled.throttle_sleeps,
        throttled.throttled_bytes,
    )


def test_stop_closes_open_connections(upstream):
    proxy = FaultProxy(upstream.address)
    with proxy:
        assert proxy.url == f"http://127.0.0.1:{proxy.address[1]}"
        sock = socket.create_connection(proxy.address, timeout=TIMEOUT)
        sock.sendall(b"GET /small HTTP/1.1\r\nHost: test\r\n\r\n")
        received = b""
        while not received.endswith(SMALL):
            received += sock.recv(4096)
    # The keep-alive connection was still open; stop() must have closed it.
    try:
        assert sock.recv(4096) == b""
    except ConnectionResetError:
        pass
    finally:
        sock.close()


@pytest.mark.parametrize(
    "arm",
    [
        lambda p: p.cut_after(-1),
        lambda p: p.cut_after(10, times=0),
        lambda p: p.corrupt(min_body=0),
        lambda p: p.corrupt(offset=-1),
        lambda p: p.throttle(0),
    ],
    ids=["negative-cut", "zero-times", "zero-min-body", "negative-offset", "zero-rate"],
)
def test_invalid_fault_arguments_are_refused(proxy, arm):
    with pytest.raises(ValueError, match=r"must be|positive rate"):
        arm(proxy)
