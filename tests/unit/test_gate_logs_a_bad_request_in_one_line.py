"""A request the gate's HTTP parser refuses (smg's HTTP/2 preface, probing each new worker for gRPC)
is logged as one warning line, not as an ERROR with a traceback; the client still gets 400."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web

from kvant_runtime.gate import bad_requests_log

HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _send_raw(payload: bytes) -> bytes:
    app = web.Application()
    app.router.add_get("/", _ok)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(payload)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(200), 5)
        writer.close()
        await asyncio.sleep(0.1)  # the server logs after answering
        return answer
    finally:
        await runner.cleanup()


@pytest.fixture
def one_line() -> object:
    server_log = logging.getLogger(bad_requests_log.AIOHTTP_SERVER_LOGGER)
    before = list(server_log.filters)
    bad_requests_log.install()
    yield
    server_log.filters[:] = before


def test_an_http2_preface_is_one_warning_line_and_a_400(one_line, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger=bad_requests_log.AIOHTTP_SERVER_LOGGER)
    answer = asyncio.run(_send_raw(HTTP2_PREFACE))
    assert answer.split(b" ", 2)[1] == b"400", answer
    records = [r for r in caplog.records if r.name == bad_requests_log.AIOHTTP_SERVER_LOGGER]
    assert records, "aiohttp logged nothing: the test no longer sees what it checks"
    assert all(r.exc_info is None and r.levelno == logging.WARNING for r in records), records
    assert "event=bad_http_request" in records[0].getMessage() and "PRI" in records[0].getMessage()


def test_without_the_filter_aiohttp_logs_a_traceback(caplog) -> None:
    """What the filter is for: the same request logged by aiohttp alone."""
    caplog.set_level(logging.DEBUG, logger=bad_requests_log.AIOHTTP_SERVER_LOGGER)
    asyncio.run(_send_raw(HTTP2_PREFACE))
    records = [r for r in caplog.records if r.name == bad_requests_log.AIOHTTP_SERVER_LOGGER]
    assert any(r.exc_info is not None and r.levelno == logging.ERROR for r in records), records
