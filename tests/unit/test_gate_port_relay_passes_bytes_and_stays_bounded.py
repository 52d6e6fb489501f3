"""The gate's TCP relay (a prefill pod's bootstrap port, pod IP -> the engine's loopback): bytes pass
both ways unchanged, half-closes are forwarded, and it stays bounded: connections past the cap are
closed at once, an idle pair is closed, and an unreachable engine closes the client's connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kvant_runtime.gate.port_relay import RelayConfig, running_relay
from tests.unit.gate_harness import closed_port_url, run


@asynccontextmanager
async def echo_server() -> AsyncIterator[tuple[str, int]]:
    """Answers every chunk upper-cased, and closes its side when the client half-closes."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            writer.write(chunk.upper())
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[:2]
    finally:
        server.close()


async def _exchange(address: tuple[str, int], payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(*address)
    writer.write(payload)
    await writer.drain()
    writer.write_eof()
    answer = await asyncio.wait_for(reader.read(), timeout=5)
    writer.close()
    return answer


def test_bytes_pass_both_ways_and_a_half_close_ends_the_pair() -> None:
    async def scenario() -> None:
        async with echo_server() as target, running_relay(RelayConfig(("127.0.0.2", 0), target)) as relay:
            payload = b"PUT /route room=42 " + bytes(range(256)) * 512
            assert await _exchange(relay, payload) == payload.upper()

    run(scenario())


def test_connections_past_the_cap_are_closed_at_once() -> None:
    async def scenario() -> None:
        async with echo_server() as target:
            config = RelayConfig(("127.0.0.2", 0), target, max_connections=1, idle_seconds=30)
            async with running_relay(config) as relay:
                _, first = await asyncio.open_connection(*relay)  # holds the one slot
                await asyncio.sleep(0.1)
                reader, _ = await asyncio.open_connection(*relay)
                assert await asyncio.wait_for(reader.read(), timeout=5) == b""  # closed, not queued
                first.close()

    run(scenario())


def test_an_idle_pair_is_closed() -> None:
    async def scenario() -> None:
        async with echo_server() as target:
            config = RelayConfig(("127.0.0.2", 0), target, idle_seconds=0.3)
            async with running_relay(config) as relay:
                reader, writer = await asyncio.open_connection(*relay)
                assert await asyncio.wait_for(reader.read(), timeout=5) == b""
                writer.close()

    run(scenario())


def test_an_unreachable_engine_closes_the_clients_connection() -> None:
    async def scenario() -> None:
        port = int(closed_port_url().rsplit(":", 1)[1])
        async with running_relay(RelayConfig(("127.0.0.2", 0), ("127.0.0.1", port))) as relay:
            reader, writer = await asyncio.open_connection(*relay)
            assert await asyncio.wait_for(reader.read(), timeout=15) == b""
            writer.close()

    run(scenario())
