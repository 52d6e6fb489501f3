"""A TCP relay from the pod's IP to one engine port on loopback: the prefill bootstrap port.

With prefill/decode disaggregation, a decode engine asks the prefill engine's bootstrap server
(SGLang's `--disaggregation-bootstrap-port`) where to fetch a request's KV. SGLang binds that server
to its `--host`, which in a Kvant pod is loopback (the gate is the pod's door). So the gate, which
already owns the pod's network face, relays that one port from the pod IP to the engine, byte for
byte: no other engine port is reachable, and the model's NetworkPolicy admits only the model's own
pods to it. The relay binds the pod IP, not 0.0.0.0, because the engine holds 127.0.0.1 on the same
port number (the address the prefill's own ranks register at).

Bounded like the rest of the gate: at most `max_connections` at once (more are closed at accept),
and a connection idle for `idle_seconds` in both directions is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

log = logging.getLogger("kvant.gate")
CHUNK = 64 * 1024


@dataclass(frozen=True)
class RelayConfig:
    listen: tuple[str, int]
    target: tuple[str, int]
    max_connections: int = 256
    idle_seconds: float = 300.0


class PortRelay:
    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.open_connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.open_connections >= self.config.max_connections:
            log.warning(
                "event=relay_refused reason=too_many_connections limit=%d", self.config.max_connections
            )
            writer.close()
            return
        self.open_connections += 1
        try:
            try:
                upstream_reader, upstream_writer = await asyncio.wait_for(
                    asyncio.open_connection(*self.config.target), timeout=10.0
                )
            except (OSError, TimeoutError) as error:
                log.warning("event=relay_upstream_unreachable target=%s error=%r", self.config.target, error)
                return
            try:
                await self._pipe_both(reader, writer, upstream_reader, upstream_writer)
            finally:
                upstream_writer.close()
        finally:
            self.open_connections -= 1
            writer.close()

    async def _pipe_both(
        self,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream_writer: asyncio.StreamWriter,
    ) -> None:
        activity = asyncio.Event()
        pipes = [
            asyncio.create_task(_pipe(client_reader, upstream_writer, activity)),
            asyncio.create_task(_pipe(upstream_reader, client_writer, activity)),
        ]
        try:
            # Until both directions end (each forwards EOF to the other side) or nothing moves
            # either way for idle_seconds.
            while not all(pipe.done() for pipe in pipes):
                activity.clear()
                try:
                    await asyncio.wait_for(activity.wait(), timeout=self.config.idle_seconds)
                except TimeoutError:
                    return
        finally:
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, activity: asyncio.Event) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
            activity.set()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass
    finally:
        activity.set()


@contextlib.asynccontextmanager
async def running_relay(config: RelayConfig) -> AsyncIterator[tuple[str, int]]:
    """Serves the relay; yields the address it listens on."""
    relay = PortRelay(config)
    server = await asyncio.start_server(relay.handle, *config.listen)
    try:
        address = server.sockets[0].getsockname()
        log.info("event=relay_started listen=%s:%d target=%s:%d", address[0], address[1], *config.target)
        yield address[0], address[1]
    finally:
        server.close()
        await server.wait_closed()
