"""The retraction counter read through a serving pod's merged metrics page: a page the gate served
without the engine's series (its read of the engine failed) is read again, never taken as 0; one that
never shows the engine is an error that says so."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvant_dev import loadgen
from kvant_dev.loadgen import EngineMetricsMissing, engine_retractions

GATE_ONLY = "kvant_gate_admitted_total 3.0\n"
WITH_ENGINE = (
    GATE_ONLY
    + 'sglang:num_running_reqs{model_name="m"} 2.0\n'
    + 'sglang:num_retracted_requests_total{model_name="m"} 14.0\n'
)


class Pages:
    """A metrics endpoint that serves the given pages in turn, then the last one for ever."""

    def __init__(self, pages: list[str]) -> None:
        self.pages, self.served = pages, 0

    def next(self) -> str:
        page = self.pages[min(self.served, len(self.pages) - 1)]
        self.served += 1
        return page


@pytest.fixture
def serve() -> Iterator[Callable[[Pages], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(pages: Pages) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages.next().encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()


def test_a_page_without_the_engine_is_read_again_not_taken_as_zero(serve, monkeypatch) -> None:
    monkeypatch.setattr("kvant_dev.loadgen.time.sleep", lambda _seconds: None)
    pages = Pages([GATE_ONLY, GATE_ONLY, WITH_ENGINE])
    assert engine_retractions(serve(pages)) == 14.0
    assert pages.served == 2 + loadgen.COUNTER_READS


def test_a_counter_the_page_leaves_out_once_is_not_read_as_zero(serve, monkeypatch) -> None:
    monkeypatch.setattr("kvant_dev.loadgen.time.sleep", lambda _seconds: None)
    no_counter = GATE_ONLY + 'sglang:num_running_reqs{model_name="m"} 0.0\n'
    assert engine_retractions(serve(Pages([no_counter, WITH_ENGINE, no_counter]))) == 14.0


def test_an_engine_that_never_shows_is_an_error_naming_it(serve, monkeypatch) -> None:
    monkeypatch.setattr("kvant_dev.loadgen.time.sleep", lambda _seconds: None)
    pages = Pages([GATE_ONLY])
    with pytest.raises(EngineMetricsMissing, match="sglang:num_running_reqs"):
        engine_retractions(serve(pages))
    assert pages.served == loadgen.ENGINE_METRICS_ATTEMPTS


def test_an_engine_without_retractions_yet_reads_zero(serve) -> None:
    assert (
        engine_retractions(serve(Pages([GATE_ONLY + 'sglang:num_running_reqs{model_name="m"} 0.0\n']))) == 0.0
    )
