"""The gate follows its limits ConfigMap through the API (LIST, then WATCH from the listed version),
re-lists after 410, falls back to the mounted file while the API cannot be read, and turns broken or
oversized answers into one clear log line while the last good limits stay in force."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from kvant_contracts.limits import parse_limits, render_limits
from kvant_runtime.gate.gate_server import Gate
from kvant_runtime.gate.limits_source import LimitsText
from kvant_runtime.gate.limits_watch import ApiServer, ConfigMapWatch, LimitsConfigMap
from tests.unit.configmap_api import ConfigMapApi, configmap_api
from tests.unit.gate_harness import (
    KubeletLimitsDir,
    closed_port_url,
    gate_in_front_of,
    gate_metric,
    held_engine,
    run,
    until,
)


def limits(max_concurrency: int) -> str:
    """The document as the operator renders it, so the file and the API carry the same bytes."""
    return render_limits(parse_limits({"maxConcurrency": max_concurrency}))


@contextlib.asynccontextmanager
async def gate_with_api(
    tmp_path: Path, api_limits: int | None, file_limits: int = 5
) -> AsyncIterator[tuple[Gate, str, ConfigMapApi, KubeletLimitsDir, aiohttp.ClientSession]]:
    files = KubeletLimitsDir(tmp_path / "limits")
    files.root.mkdir()
    files.write(limits(file_limits))
    async with configmap_api(tmp_path / "token") as api:
        if api_limits is not None:
            api.put(limits(api_limits))
        async with (
            held_engine() as engine,
            gate_in_front_of(engine.url, files, limits_configmap=api.target()) as (gate, url),
            aiohttp.ClientSession() as session,
        ):
            yield gate, url, api, files, session


def in_force(gate: Gate, max_concurrency: int) -> bool:
    return gate.admission.limits.maxConcurrency == max_concurrency


def test_the_list_replaces_the_file_at_start_and_edits_arrive_by_watch(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with gate_with_api(tmp_path, api_limits=7) as (gate, url, api, files, session):
            await until(lambda: in_force(gate, 7), "the ConfigMap's limits from the first list")
            assert await gate_metric(session, url, "kvant_gate_limits_source", source="api") == 1
            assert api.requests[0] == {"fieldSelector": "metadata.name=tiny-limits"}
            listed = api.version

            api.put(limits(9))
            await until(lambda: in_force(gate, 9), "the edit, delivered by the watch")
            watch = api.watches()[0]
            assert (
                watch["resourceVersion"] == str(listed)
                and watch["fieldSelector"] == "metadata.name=tiny-limits"
            )
            assert api.lists() == 1
            assert files.path.read_text() == limits(5)  # the file never had it: the API did it

    run(scenario())


def test_a_compacted_version_is_listed_again_and_followed_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with gate_with_api(tmp_path, api_limits=7) as (gate, _url, api, _files, _session):
            await until(lambda: in_force(gate, 7) and len(api.watches()) == 1, "the watch to start")
            api.compact()
            await until(lambda: api.lists() == 2, "a new list after 410 Gone")
            api.put(limits(12))
            await until(lambda: in_force(gate, 12), "the edit after the new list")

    run(scenario())


def test_while_the_api_is_down_the_file_is_followed_but_a_lagging_file_never_wins(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="kvant.gate")

    async def scenario() -> None:
        async with gate_with_api(tmp_path, api_limits=7) as (gate, _url, api, files, _session):
            await until(lambda: in_force(gate, 7), "the first list")
            api.put(limits(9))
            await until(lambda: in_force(gate, 9), "the watched edit")
            api.fail(503)
            await until(lambda: "limits_api_unavailable" in caplog.text, "the gate to notice the outage")
            assert "answered 503" in caplog.text

            files.write(limits(7))  # the kubelet's projection, a version behind what is in force
            await until(lambda: "reason=behind_api" in caplog.text, "the file change to be judged")
            assert in_force(gate, 9)

            api.put(limits(11))  # an edit the gate cannot see through the API; the kubelet projects it
            files.write(limits(11))
            await until(lambda: in_force(gate, 11), "the file's new content while the API is down")
            api.status = 200
            await until(
                lambda: "limits_api_synced" in caplog.text.split("limits_api_unavailable")[-1], "recovery"
            )
            assert in_force(gate, 11)

    run(scenario())


def test_a_broken_watch_event_is_reported_and_the_last_good_limits_stay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with gate_with_api(tmp_path, api_limits=7) as (gate, _url, api, _files, _session):
            await until(lambda: in_force(gate, 7) and len(api.watches()) == 1, "the watch to start")
            api.send_raw(b'{"type": "MODIFIED", "object": {"data": \n')
            await until(lambda: "not JSON" in caplog.text, "the broken event to be reported")
            assert "ConfigMap serving/tiny-limits" in caplog.text and "Traceback" not in caplog.text
            assert in_force(gate, 7)
            api.put(limits(13))
            await until(lambda: in_force(gate, 13), "the next edit, after a new list")

    run(scenario())


def test_an_invalid_document_in_the_configmap_is_refused_naming_configmap_and_field(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with gate_with_api(tmp_path, api_limits=7) as (gate, url, api, _files, session):
            await until(lambda: in_force(gate, 7), "the first list")
            api.put(limits(7).replace("maxConcurrency: 7", "maxConcurrency: 0"))

            async def refused() -> bool:
                return await gate_metric(session, url, "kvant_gate_limits_valid") == 0

            await until(refused, "the gate to report the document invalid")
            version = api.version
            expected = (
                f"ConfigMap serving/tiny-limits key limits.yaml (resourceVersion {version}): "
                "maxConcurrency must be a whole number ≥ 1, got 0"
            )
            assert expected in caplog.text
            assert in_force(gate, 7)

    run(scenario())


def test_forbidden_names_the_missing_permission_and_the_file_still_works(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with gate_with_api(tmp_path, api_limits=7) as (gate, url, api, files, session):
            api.fail(403)
            await until(lambda: "answered 403" in caplog.text, "the refusal to be reported")
            assert "needs get, list and watch on this ConfigMap" in caplog.text
            files.write(limits(6))
            await until(lambda: in_force(gate, 6), "the file's change")
            assert await gate_metric(session, url, "kvant_gate_limits_source", source="file") == 1

    run(scenario())


def test_with_no_api_server_the_gate_serves_and_follows_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        files = KubeletLimitsDir(tmp_path)
        files.write(limits(5))
        nowhere = LimitsConfigMap(ApiServer(closed_port_url()), "serving", "tiny-limits")
        async with (
            held_engine() as engine,
            gate_in_front_of(engine.url, files, limits_configmap=nowhere) as (
                gate,
                _url,
            ),
        ):
            await until(lambda: "is unreachable or broke off" in caplog.text, "the failure to be reported")
            files.write(limits(8))
            await until(lambda: in_force(gate, 8), "the file's change")

    run(scenario())


def test_an_oversized_list_or_event_fails_clearly_and_never_hangs(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with configmap_api(tmp_path / "token") as api:
            api.put(limits(7))
            offers: list[LimitsText] = []
            watch = ConfigMapWatch(api.target(), max_bytes=4096)
            task = asyncio.create_task(watch.follow(offers.append))
            try:
                await until(lambda: len(api.watches()) == 1, "the watch to start")
                api.put(limits(7) + "#" * 8192)  # a comment: valid YAML, but past the cap
                await until(
                    lambda: any("event is over 4096 bytes" in o.problem for o in offers), "the event cap"
                )
                await until(
                    lambda: any("answer is over 4096 bytes" in o.problem for o in offers), "the list cap"
                )
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            assert offers[0].content == limits(7).encode()

    run(scenario())
