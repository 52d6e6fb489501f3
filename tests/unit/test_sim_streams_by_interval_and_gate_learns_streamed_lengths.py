"""SGLang's `--stream-interval` groups streamed tokens: the simulator sends the first token alone, then
`interval` at a time, then the rest. The gate learns each streamed answer's length from its last
event's `meta_info`/`usage`, not from the number of events, which would undercount by the interval."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from kvant_runtime.gate.answer_counts import streamed_output_tokens
from kvant_runtime.gate.answer_relay import STREAM_TAIL_BYTES
from kvant_runtime.gate.forecast import MIN_SAMPLES
from kvant_runtime.sim.cost import CostModel
from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.output_lengths import parse_output_lengths
from kvant_runtime.sim.sim_server import ServerInfo, SimServer
from tests.unit.gate_harness import KubeletLimitsDir, gate_in_front_of, run, serving, until

FAST = CostModel(decode_base_s=0.0002, decode_per_request_s=0.0, prefill_per_token_s=0.0)
INTERVAL = 8


def _simulator() -> SimServer:
    config = EngineConfig(
        kv_tokens=200_000,
        max_running_requests=256,
        context_length=8192,
        cost=FAST,
        output_lengths=parse_output_lengths("lognormal:40,0.5"),
    )
    return SimServer(Engine(config), ServerInfo("tiny", stream_interval=INTERVAL))


async def _events(session: aiohttp.ClientSession, url: str, path: str, body: dict) -> list[dict]:
    async with session.post(url + path, json={**body, "stream": True}) as resp:
        assert resp.status == 200
        raw = (await resp.read()).decode()
    datas = [e.removeprefix("data: ") for e in raw.split("\n\n") if e.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    return [json.loads(d) for d in datas[:-1]]


def test_streamed_chunks_follow_the_interval_and_the_last_carries_the_count() -> None:
    async def scenario() -> None:
        async with serving(_simulator().app()) as url, aiohttp.ClientSession() as session:
            for i in range(10):
                body = {"text": f"question {i}", "sampling_params": {"max_new_tokens": 400}}
                chunks = await _events(session, url, "/generate", body)
                sizes = [len(c["output_ids"]) for c in chunks]
                steps = [b - a for a, b in zip([0, *sizes], sizes, strict=False)]
                assert (
                    steps[0] == 1 and all(s == INTERVAL for s in steps[1:-1]) and 1 <= steps[-1] <= INTERVAL
                )
                assert chunks[-1]["meta_info"]["completion_tokens"] == sizes[-1]
                assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "stop"
            completion = {"prompt": "question", "max_tokens": 400}
            deltas = await _events(session, url, "/v1/completions", completion)
            texts = [c["choices"][0]["text"] for c in deltas[:-1]]  # the last chunk only finishes
            assert len(texts[0].split()) == 1 and len(texts) >= 2
            async with session.get(url + "/get_server_info") as resp:
                assert (await resp.json())["stream_interval"] == INTERVAL

    run(scenario())


def test_the_gate_learns_streamed_lengths_from_the_last_event(tmp_path: Path) -> None:
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 64, "concurrency": {"min": 1}, "admission": "forecast"})
        async with (
            serving(_simulator().app()) as engine_url,
            gate_in_front_of(engine_url, limits) as (gate, url),
            aiohttp.ClientSession() as session,
        ):
            await until(lambda: gate.admission.token_capacity is not None, "the engine's capacity")
            answered = []
            for i in range(MIN_SAMPLES):
                body = {"text": f"question {i}", "sampling_params": {"max_new_tokens": 400}}
                chunks = await _events(session, url, "/generate", body)
                answered.append(chunks[-1]["meta_info"]["completion_tokens"])
            assert max(answered) > INTERVAL  # grouped streams: counting events would undercount
            assert sorted(gate.forecast._recent) == sorted(answered)

    run(scenario())


def test_a_stream_without_a_count_falls_back_to_one_token_per_event() -> None:
    openai = b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"text":"b"}]}\n\ndata: [DONE]\n\n'
    assert streamed_output_tokens(openai, events=3) == [2]
    usage = b'data: {"choices":[],"usage":{"completion_tokens":17}}\n\ndata: [DONE]\n\n'
    assert streamed_output_tokens(usage, events=6) == [17]
    cut = b'_ids":[1,2,3],"meta_info":{"completion_tokens":3}}\n\ndata: [DONE]\n\n'  # tail began mid-event
    assert streamed_output_tokens(cut, events=9) == [8]  # counted: the cut event cannot be read
    assert streamed_output_tokens(b"", events=0) == []


def test_a_stream_longer_than_the_kept_tail_still_reads_its_last_event(tmp_path: Path) -> None:
    # Two tokens per chunk, each repeating the text and ids so far: 600 tokens stream about 1 MB, far
    # past the 256 KiB the gate keeps, and the gate must still read the final count (counting the 301
    # events would say 300).
    sim = SimServer(
        Engine(EngineConfig(kv_tokens=200_000, max_running_requests=8, context_length=8192, cost=FAST)),
        ServerInfo("tiny", stream_interval=2),
    )

    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 64, "concurrency": {"min": 1}, "admission": "forecast"})
        async with (
            serving(sim.app()) as engine_url,
            gate_in_front_of(engine_url, limits) as (gate, url),
            aiohttp.ClientSession() as session,
        ):
            body = {"text": "question", "sampling_params": {"max_new_tokens": 600, "ignore_eos": True}}
            async with session.post(url + "/generate", json={**body, "stream": True}) as resp:
                streamed = len(await resp.read())
            assert streamed > STREAM_TAIL_BYTES
            assert list(gate.forecast._recent) == [600]

    run(scenario())
