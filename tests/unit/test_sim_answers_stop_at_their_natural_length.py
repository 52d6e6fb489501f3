"""With --output-lengths the simulator generates like a model: each answer stops at a drawn natural
length (finish_reason stop) unless it reaches max_new_tokens first or sets ignore_eos; the same seed
gives the same lengths; bad specs are refused with the form named."""

from __future__ import annotations

import asyncio
import random
import statistics
from pathlib import Path

import aiohttp
import pytest

from kvant_runtime.sim.cost import CostModel
from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.output_lengths import OutputLengthsError, parse_output_lengths
from kvant_runtime.sim.sim_server import ServerInfo, SimServer
from tests.unit.gate_harness import run, serving

FAST = CostModel(decode_base_s=0.0002, decode_per_request_s=0.0, prefill_per_token_s=0.0)


def _simulator(spec: str, seed: int = 0) -> SimServer:
    config = EngineConfig(
        kv_tokens=200_000,
        max_running_requests=256,
        context_length=8192,
        cost=FAST,
        seed=seed,
        output_lengths=parse_output_lengths(spec),
    )
    return SimServer(Engine(config), ServerInfo("tiny"))


async def _lengths(url: str, session: aiohttp.ClientSession, **sampling: object) -> list[tuple[int, str]]:
    async def one(i: int) -> tuple[int, str]:
        body = {"text": f"question {i}", "sampling_params": {"max_new_tokens": 400, **sampling}}
        async with session.post(url + "/generate", json=body) as resp:
            answer = await resp.json()
        return len(answer["output_ids"]), answer["meta_info"]["finish_reason"]["type"]

    return list(await asyncio.gather(*(one(i) for i in range(40))))


def test_answers_stop_early_at_drawn_lengths_and_ignore_eos_runs_to_the_limit() -> None:
    async def scenario() -> None:
        async with serving(_simulator("lognormal:60,0.5").app()) as url, aiohttp.ClientSession() as session:
            natural = await _lengths(url, session)
            stopped = [n for n, reason in natural if reason == "stop"]
            assert len(stopped) >= 35 and 35 <= statistics.median(stopped) <= 100  # median near 60
            assert all(n == 400 for n, reason in natural if reason == "length")
            forced = await _lengths(url, session, ignore_eos=True)
            assert forced == [(400, "length")] * 40
        async with serving(_simulator("lognormal:60,0.5").app()) as url, aiohttp.ClientSession() as session:
            assert await _lengths(url, session) == natural  # the same seed, the same answers

    run(scenario())


def test_a_trace_of_lengths_is_drawn_from(tmp_path: Path) -> None:
    trace = tmp_path / "lengths.txt"
    trace.write_text("5\n7\n")
    lengths = parse_output_lengths(f"file:{trace}")
    assert {lengths.draw(random.Random(i)) for i in range(50)} == {5, 7}


@pytest.mark.parametrize(
    "spec", ["lognormal:0,1", "lognormal:100", "lognormal:a,b", "gamma:1,2", "file:/nonexistent"]
)
def test_a_bad_spec_names_the_forms(spec: str) -> None:
    with pytest.raises(OutputLengthsError, match="--output-lengths"):
        parse_output_lengths(spec)
