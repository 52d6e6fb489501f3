"""The simulator answers batches and parallel samples as SGLang does: one result (or choice) per
sequence, each sequence holding KV, the samples of one prompt sharing it."""

from __future__ import annotations

import aiohttp

from kvant_runtime.sim.cost import CostModel
from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.sim_server import ServerInfo, SimServer
from tests.unit.gate_harness import run, serving

FAST = CostModel(decode_base_s=0.0005, decode_per_request_s=0.0, prefill_per_token_s=0.0)


def _simulator() -> SimServer:
    config = EngineConfig(kv_tokens=100_000, max_running_requests=64, context_length=4096, cost=FAST)
    return SimServer(Engine(config), ServerInfo("tiny"))


def test_batches_and_samples_get_one_answer_per_sequence() -> None:
    async def scenario() -> None:
        async with serving(_simulator().app()) as url, aiohttp.ClientSession() as session:
            batch = {"text": ["a" * 40, "b" * 80], "sampling_params": {"max_new_tokens": 3}}
            async with session.post(url + "/generate", json=batch) as resp:
                results = await resp.json()
            assert [len(r["output_ids"]) for r in results] == [3, 3]
            assert [r["meta_info"]["prompt_tokens"] for r in results] == [10, 20]

            samples = {"text": "c" * 40, "sampling_params": {"max_new_tokens": 2, "n": 3}}
            async with session.post(url + "/generate", json=samples) as resp:
                results = await resp.json()
            # the first sample holds the prompt's KV; the others share it (SGLang's radix cache)
            assert [r["meta_info"]["prompt_tokens"] for r in results] == [10, 1, 1]

            chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "n": 2}
            async with session.post(url + "/v1/chat/completions", json=chat) as resp:
                body = await resp.json()
            assert [c["index"] for c in body["choices"]] == [0, 1]
            assert body["usage"]["completion_tokens"] == 4

            streamed = {**samples, "stream": True}
            async with session.post(url + "/generate", json=streamed) as resp:
                assert resp.status == 400

    run(scenario())
