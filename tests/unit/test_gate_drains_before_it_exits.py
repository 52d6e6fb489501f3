"""Told to stop (SIGTERM), the gate drains: readiness answers 503 so the Service and the router drop the
pod, while what it holds and what still reaches it are served as before; it exits once idle and quiet,
or at its deadline. The engine's preStop hook waits for exactly that (kvant_contracts.drain)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from kvant_contracts.drain import GATE_DRAIN_PATH, drain_wait_script
from kvant_contracts.serving_pod import GATE_READINESS_PATH
from kvant_runtime.gate.gate_server import METRICS_PATH, GateConfig, run_gate
from tests.unit.gate_harness import (
    WAIT_SECONDS,
    HeldEngine,
    KubeletLimitsDir,
    closed_port_url,
    gate_in_front_of,
    held_engine,
    run,
    until,
)

BODY = {"text": "hello", "sampling_params": {"max_new_tokens": 16}}
QUIET = 0.2  # the quiet period, short here: every step below waits on an event, not on it


@contextlib.asynccontextmanager
async def gate_task(
    engine: HeldEngine, tmp_path: Path, quiet: float = QUIET
) -> AsyncIterator[tuple[str, asyncio.Event, asyncio.Task[None]]]:
    """`run_gate` as `kvant gate` runs it; yields its URL, the stop event (SIGTERM) and its task."""
    limits = KubeletLimitsDir(tmp_path)
    limits.write({"maxConcurrency": 4})
    url = closed_port_url()
    port = int(url.rsplit(":", 1)[1])
    config = GateConfig(
        listen=("127.0.0.1", port),
        upstream=engine.url,
        limits_path=limits.path,
        interval=0.05,
        drain_seconds=4 * WAIT_SECONDS,
        drain_quiet_seconds=quiet,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run_gate(config, stop))
    try:
        async with aiohttp.ClientSession() as session:
            await until(lambda: _answers(session, url + METRICS_PATH), "the gate to listen")
        yield url, stop, task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _answers(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url) as resp:
            return resp.status == 200
    except aiohttp.ClientConnectionError:
        return False


async def _status(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url) as resp:
        await resp.read()
        return resp.status


async def _drain_state(session: aiohttp.ClientSession, url: str) -> dict[str, object]:
    async with session.get(url + GATE_DRAIN_PATH) as resp:
        assert resp.status == 200
        state: dict[str, object] = await resp.json()
        return state


async def _generate(url: str) -> int:
    """One generation on a connection of its own, as a client the router sent late would open."""
    async with aiohttp.ClientSession() as session, session.post(url + "/generate", json=BODY) as resp:
        assert (await resp.json())["text"] == "ok"
        return resp.status


def test_a_draining_gate_turns_unready_serves_everything_then_exits(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="kvant.gate")

    async def scenario() -> None:
        async with (
            held_engine() as engine,
            gate_task(engine, tmp_path) as (url, stop, task),
            aiohttp.ClientSession() as probe,
        ):
            assert await _status(probe, url + GATE_READINESS_PATH) == 200
            assert (await _drain_state(probe, url))["draining"] is False
            in_flight = asyncio.create_task(_generate(url))
            await until(lambda: engine.running == 1, "the first request to reach the engine")

            stop.set()  # SIGTERM
            await until(lambda: _status_is(probe, url + GATE_READINESS_PATH, 503), "readiness to answer 503")
            async with probe.get(url + GATE_READINESS_PATH) as resp:
                assert (await resp.json())["error"]["type"] == "draining"
            state = await _drain_state(probe, url)
            assert state["draining"] is True and state["inFlight"] == 1

            late = asyncio.create_task(_generate(url))  # routed before the pod's removal propagated
            await until(lambda: engine.running == 2, "the late request to reach the engine")
            assert not task.done()

            engine.release.set()
            assert await in_flight == 200
            assert await late == 200
            await asyncio.wait_for(task, WAIT_SECONDS)  # idle and quiet: it exits of itself
            with pytest.raises(aiohttp.ClientConnectionError):
                await _status(probe, url + GATE_READINESS_PATH)
        assert engine.completed == 2 and engine.aborted == 0

    run(scenario())
    assert "event=gate_draining in_flight=1 queued=0" in caplog.text
    assert "event=gate_drained outcome=idle" in caplog.text
    assert "arrived_while_draining=1 in_flight=0 queued=0" in caplog.text


async def _status_is(session: aiohttp.ClientSession, url: str, status: int) -> bool:
    return await _status(session, url) == status


def test_an_idle_gate_still_serves_what_arrives_while_it_drains(tmp_path):
    async def scenario() -> None:
        # A quiet period that cannot end within the test: the gate, idle when told to stop, is still
        # there for a request the router sent before it dropped the pod.
        async with held_engine() as engine, gate_task(engine, tmp_path, quiet=3600.0) as (url, stop, task):
            engine.release.set()
            stop.set()
            async with aiohttp.ClientSession() as probe:
                await until(lambda: _status_is(probe, url + GATE_READINESS_PATH, 503), "the drain to start")
            assert await _generate(url) == 200
            assert not task.done()
            task.cancel()  # a second signal: it stops at once
            with contextlib.suppress(asyncio.CancelledError):
                await task

    run(scenario())


def test_the_deadline_ends_a_drain_that_never_goes_idle(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 4})
        async with held_engine() as engine:
            async with gate_in_front_of(engine.url, limits, drain_seconds=0.2) as (gate, url):
                stuck = asyncio.create_task(_generate(url))
                await until(lambda: engine.running == 1, "the request to reach the engine")
                assert await gate.drain() == "deadline"
            # Closing cuts what is still running: the engine sees it aborted, the client a broken answer.
            await until(lambda: engine.aborted == 1, "the engine to see the request aborted")
            with pytest.raises(aiohttp.ClientError):
                await stuck

    run(scenario())


async def _wait_script(port: int, notice: float = 3.0) -> tuple[int, str]:
    script = drain_wait_script(port, 4 * WAIT_SECONDS, notice=notice, poll=0.05)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-c", script, stdout=asyncio.subprocess.PIPE
    )
    output, _ = await process.communicate()
    return process.returncode or 0, output.decode().strip()


def test_the_engines_prestop_hook_returns_once_the_drained_gate_has_gone(tmp_path):
    async def scenario() -> None:
        async with held_engine() as engine, gate_task(engine, tmp_path) as (url, stop, task):
            in_flight = asyncio.create_task(_generate(url))
            await until(lambda: engine.running == 1, "the request to reach the engine")
            stop.set()
            async with aiohttp.ClientSession() as probe:
                await until(lambda: _status_is(probe, url + GATE_READINESS_PATH, 503), "the drain to start")
            hook = asyncio.create_task(_wait_script(int(url.rsplit(":", 1)[1])))
            engine.release.set()
            assert await in_flight == 200
            await asyncio.wait_for(task, WAIT_SECONDS)
            assert await hook == (0, "the gate has closed")

    run(scenario())


def test_the_prestop_hook_does_not_wait_for_a_gate_that_is_not_draining(tmp_path):
    async def scenario() -> None:
        # The engine alone restarts (a failed liveness probe): the gate stays, and so must not be waited for.
        async with held_engine() as engine, gate_task(engine, tmp_path) as (url, _stop, task):
            assert await _wait_script(int(url.rsplit(":", 1)[1]), notice=0.1) == (
                0,
                "the gate is not draining",
            )
            assert not task.done()
        # No gate at all (it crashed, or never started): nothing to wait for.
        assert await _wait_script(int(closed_port_url().rsplit(":", 1)[1])) == (0, "the gate has closed")

    run(scenario())
