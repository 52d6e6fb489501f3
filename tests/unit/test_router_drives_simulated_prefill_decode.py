"""Prefill/decode through the real router: smg (the pinned wheel) drives the simulator's prefill and
decode roles, each behind its own gate, with the prefill's bootstrap port reached through the gate's
relay, as in a serving pod. Then the stand-in's own rules: what each role refuses, and that a decode
holds its transferred prompt without computing it."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import aiohttp
import pytest

from kvant_contracts import prometheus_text
from kvant_contracts.limits import Limits, render_limits
from kvant_runtime.sim.cost import CostModel
from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.pd_handoff import Bootstrap, HandoffBoard, HandoffError, fetch_handoff
from kvant_runtime.sim.sim_server import ServerInfo, SimServer
from tests.unit.gate_harness import closed_port_url, run, serving

KVANT = [sys.executable, "-m", "kvant_cli.main"]
SMG = shutil.which("smg", path=str(Path(sys.executable).parent))
WAIT_SECONDS = 60.0
POD_IP = "127.0.0.2"  # the prefill "pod": its gate and relay bind here; the engine keeps 127.0.0.1


def _port(url: str) -> str:
    return url.rsplit(":", 1)[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


def _wait(url: str, procs: list[subprocess.Popen[str]], check: str | None = None) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for proc in procs:
            assert proc.poll() is None, f"{proc.args!r} exited early: {proc.communicate()!r}"
        try:
            body = _get(url)
            if check is None or check in body.decode():
                return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} never answered{f' with {check!r}' if check else ''}")


def _post(url: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=WAIT_SECONDS) as response:
        return dict(json.loads(response.read()))


def _metrics(gate: str) -> str:
    """The engine's metrics (through the gate) and the gate's own."""
    return _get(gate + "/metrics").decode() + _get(gate + "/gate/metrics").decode()


@pytest.fixture
def prefill_decode_behind_smg(tmp_path: Path) -> Iterator[dict[str, str]]:
    assert SMG is not None, "smg is pinned in constraints.txt and installed in the venv"
    limits = tmp_path / "limits.yaml"
    limits.write_text(render_limits(Limits()))
    prefill_engine, decode_engine = closed_port_url(), closed_port_url()
    bootstrap = _port(closed_port_url())
    prefill_gate = f"http://{POD_IP}:{_port(closed_port_url())}"
    decode_gate, router = closed_port_url(), closed_port_url()
    sim = [*KVANT, "sim", "--model-name", "tiny", "--kv-tokens", "4000"]

    def gate(listen: str, upstream: str, *extra: str) -> list[str]:
        return [*KVANT, "gate", "--listen", listen, "--upstream", upstream, "--limits", str(limits), *extra]

    commands = [
        [
            *sim,
            "--port",
            _port(prefill_engine),
            "--disaggregation-mode",
            "prefill",
            "--disaggregation-bootstrap-port",
            bootstrap,
        ],
        [*sim, "--port", _port(decode_engine), "--disaggregation-mode", "decode"],
        gate(prefill_gate.removeprefix("http://"), prefill_engine, "--relay", f"{POD_IP}:{bootstrap}"),
        gate(decode_gate.removeprefix("http://"), decode_engine),
    ]
    procs = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for c in commands
    ]
    try:
        for url in (prefill_gate, decode_gate):
            _wait(url + "/health", procs)
        # smg starts after its workers answer: it re-checks a worker that was down only every 30 s.
        smg = [SMG, "launch", "--pd-disaggregation", "--host", "127.0.0.1", "--port", _port(router)]
        smg += ["--prefill", prefill_gate, bootstrap, "--decode", decode_gate]
        smg += ["--prometheus-host", "127.0.0.1", "--prometheus-port", _port(closed_port_url())]
        procs.append(subprocess.Popen(smg, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        _wait(router + "/workers", procs, check='"decode_count":1')
        _wait(router + "/workers", procs, check='"prefill_count":1')
        yield {"router": router, "prefill": prefill_gate, "decode": decode_gate}
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)


def test_smg_serves_through_a_prefill_and_a_decode_gate_with_both_roles_metrics_moving(
    prefill_decode_behind_smg: dict[str, str],
) -> None:
    urls = prefill_decode_behind_smg
    before = {role: _metrics(urls[role]) for role in ("prefill", "decode")}
    answers = [
        _post(
            urls["router"] + "/generate", {"text": f"question {i}", "sampling_params": {"max_new_tokens": 6}}
        )
        for i in range(3)
    ]
    chat = _post(
        urls["router"] + "/v1/chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )
    for answer in answers:
        meta = answer["meta_info"]
        assert isinstance(meta, dict) and meta["completion_tokens"] == 6  # the decode's whole answer
        assert isinstance(answer["text"], str) and len(answer["text"].split()) == 6
    assert chat["usage"] == {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
    after = {role: _metrics(urls[role]) for role in ("prefill", "decode")}

    def moved(role: str, name: str) -> float:
        return prometheus_text.total(after[role], name) - prometheus_text.total(before[role], name)

    # The prefill computed each prompt and one token; the decode generated every answer.
    assert moved("prefill", "sglang:generation_tokens_total") == 4
    assert moved("decode", "sglang:generation_tokens_total") == 3 * 6 + 4
    assert moved("prefill", "kvant_gate_admitted_total") == moved("decode", "kvant_gate_admitted_total") == 4


def test_a_prefill_or_decode_refuses_a_request_that_did_not_come_through_the_router() -> None:
    async def scenario() -> None:
        for mode in ("prefill", "decode"):
            async with _sim(mode) as url:
                status, body = await _post_async(url + "/generate", {"text": "hi"})
                assert status == 400 and "send them through the router" in body["message"]
                bad = {"text": "hi", "bootstrap_host": "127.0.0.1", "bootstrap_port": 0, "bootstrap_room": 1}
                status, body = await _post_async(url + "/generate", bad)
                assert status == 400 and "bootstrap_port must be an integer port" in body["message"]

    run(scenario())


def test_a_decode_whose_prefill_never_answers_fails_the_request_naming_the_room() -> None:
    async def scenario() -> None:
        async with _sim("decode") as url:
            dead = closed_port_url().removeprefix("http://").split(":")
            body = {
                "text": "hi",
                "bootstrap_host": dead[0],
                "bootstrap_port": int(dead[1]),
                "bootstrap_room": 7,
            }
            status, answer = await _post_async(url + "/generate", body)
            assert status == 502  # the router retries it on another pair
            assert f"prefill {dead[0]}:{dead[1]} room 7" in answer["message"]

    run(scenario())


def test_the_handoff_waits_for_its_prefill_and_is_taken_once() -> None:
    async def scenario() -> None:
        board = HandoffBoard()
        async with serving(board.app()) as url:
            host, port = url.removeprefix("http://").split(":")
            waiting = asyncio.create_task(fetch_handoff(Bootstrap(host, int(port), 42), wait_seconds=5))
            await asyncio.sleep(0.2)
            assert not waiting.done()  # the decode waits for the prefill
            board.publish(42, prompt_tokens=120)
            assert await waiting == 120
            with pytest.raises(HandoffError, match="room 42 failed: HTTP 404"):
                await fetch_handoff(Bootstrap(host, int(port), 42), wait_seconds=0.2)

    run(scenario())


def test_a_decode_holds_the_transferred_prompt_without_computing_it() -> None:
    engine = Engine(
        EngineConfig(kv_tokens=4000, max_running_requests=8, context_length=4000, cost=CostModel())
    )
    transferred = engine.submit("d", 1000, 10, 0.0, "k", kv_transferred=True)
    step = engine.step(0.0)
    assert step is not None and step.kind == "prefill" and step.prefill_tokens == 0
    assert transferred.kv_tokens == 1000 and engine.used_kv_tokens == 1000  # the KV is held all the same
    computed = engine.submit("c", 1000, 10, 1.0, "k")
    while computed.kv_tokens == 0:
        step = engine.step(1.0)
        assert step is not None
    assert step.prefill_tokens == 1000


def _sim(mode: str) -> AbstractAsyncContextManager[str]:
    """A simulator of one prefill/decode role, served in-process on loopback."""
    engine = Engine(EngineConfig(kv_tokens=4000, max_running_requests=8, context_length=4000))
    return serving(SimServer(engine, ServerInfo("tiny", disaggregation_mode=mode)).app())


async def _post_async(url: str, body: dict[str, object]) -> tuple[int, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        return response.status, await response.json()
