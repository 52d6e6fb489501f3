"""The simulator speaks the parts of SGLang's HTTP API that clients, the gate and Prometheus use."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kvant_runtime.request_cost import prompt_tokens
from kvant_runtime.sim.cost import CostModel
from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.sim_server import ServerInfo, SimServer
from tests.unit.gate_harness import run, serving

FAST = CostModel(decode_base_s=0.0005, decode_per_request_s=0.0, prefill_per_token_s=0.0)


def simulator(kv_tokens: int = 2000, seed: int = 0) -> SimServer:
    config = EngineConfig(
        kv_tokens=kv_tokens, max_running_requests=32, context_length=4096, seed=seed, cost=FAST
    )
    return SimServer(Engine(config), ServerInfo("tiny", kv_cache_dtype="fp8_e4m3"))


async def sse_events(response: aiohttp.ClientResponse) -> list[Any]:
    events: list[Any] = []
    async for line in response.content:
        text = line.decode().strip()
        if text.startswith("data: "):
            payload = text.removeprefix("data: ")
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        families = text_string_to_metric_families(await resp.text())
        return {
            s.name: s.value for f in families for s in f.samples if s.labels.get("is_streaming") != "true"
        }


def test_generate_returns_the_requested_tokens_deterministically():
    body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 7}}

    async def scenario() -> None:
        async with aiohttp.ClientSession() as session:
            texts = []
            for _ in range(2):
                async with (
                    serving(simulator(seed=5).app()) as url,
                    session.post(url + "/generate", json=body) as resp,
                ):
                    result = await resp.json()
                texts.append(result["text"])
                meta = result["meta_info"]
                assert meta["completion_tokens"] == len(result["output_ids"]) == 7
                assert [meta["prompt_tokens"]] == prompt_tokens(body)
                assert meta["finish_reason"] == {"type": "length", "length": 7}
                assert len(result["text"].split()) == 7
            assert texts[0] == texts[1]

    run(scenario())


def test_streamed_completion_ends_with_usage_and_done():
    body = {"prompt": "hello", "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}

    async def scenario() -> None:
        async with (
            serving(simulator().app()) as url,
            aiohttp.ClientSession() as session,
            session.post(url + "/v1/completions", json=body) as resp,
        ):
            assert resp.headers["Content-Type"] == "text/event-stream"
            events = await sse_events(resp)
        assert events[-1] == "[DONE]"
        usage = events[-2]["usage"]
        assert usage == {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}
        pieces = [e["choices"][0]["text"] for e in events[:-2]]
        assert len([p for p in pieces if p]) == 5
        assert events[-3]["choices"][0]["finish_reason"] == "length"

    run(scenario())


def test_chat_completion_and_its_stream_agree():
    messages = [{"role": "user", "content": "Tell me a story."}]

    async def scenario() -> None:
        async with serving(simulator().app()) as url, aiohttp.ClientSession() as session:
            async with session.post(
                url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 6}
            ) as r:
                whole = await r.json()
            body = {"messages": messages, "max_tokens": 6, "stream": True}
            async with session.post(url + "/v1/chat/completions", json=body) as r:
                events = await sse_events(r)
        assert whole["object"] == "chat.completion"
        assert whole["usage"]["completion_tokens"] == 6
        streamed = "".join(e["choices"][0]["delta"]["content"] for e in events if isinstance(e, dict))
        assert streamed == whole["choices"][0]["message"]["content"]
        assert events[0]["object"] == "chat.completion.chunk"

    run(scenario())


def test_info_health_and_rejections():
    async def scenario() -> None:
        async with serving(simulator(kv_tokens=1234).app()) as url, aiohttp.ClientSession() as session:
            async with session.get(url + "/get_server_info") as resp:
                info = await resp.json()
            assert info["max_total_num_tokens"] == 1234
            assert info["kv_cache_dtype"] == "fp8_e4m3"
            async with session.get(url + "/get_model_info") as resp:
                assert (await resp.json())["is_generation"] is True
            for path in ("/health", "/health_generate"):
                async with session.get(url + path) as resp:
                    assert resp.status == 200
            too_big = {"text": "x" * 8000, "sampling_params": {"max_new_tokens": 10}}
            async with session.post(url + "/generate", json=too_big) as resp:
                assert resp.status == 400
                assert "more than the whole KV cache (1234 tokens)" in (await resp.json())["message"]
            async with session.post(url + "/generate", data="{not json") as resp:
                assert resp.status == 400

    run(scenario())


def test_token_usage_is_a_fraction_that_tracks_kv_in_use():
    body = {"text": "x" * 1600, "sampling_params": {"max_new_tokens": 400}}  # 400 + 400 tokens each

    async def scenario() -> None:
        async with serving(simulator(kv_tokens=2000).app()) as url, aiohttp.ClientSession() as session:
            requests = [asyncio.create_task(session.post(url + "/generate", json=body)) for _ in range(2)]
            seen = []
            while not all(r.done() for r in requests):
                sample = await scrape(session, url)
                seen.append(sample)
                await asyncio.sleep(0.01)
            for r in requests:
                (await r).release()
            final = await scrape(session, url)
        labels = "sglang:token_usage"
        usages = [s[labels] for s in seen]
        assert all(0.0 <= u <= 1.0 for u in usages)
        assert max(usages) > 0.5  # two requests near 800 tokens each in a 2000-token cache
        for s in seen:
            assert s[labels] == s["sglang:kv_used_tokens"] / s["sglang:max_total_num_tokens"]
            assert s["sglang:kv_used_tokens"] + s["sglang:kv_available_tokens"] == 2000
        assert final["sglang:generation_tokens_total"] == 800

    run(scenario())
