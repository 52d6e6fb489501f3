"""The gate reserves a chat prompt at the engine's own count (SGLang's /v1/tokenize renders it through
the whole chat path, tools included), falls back to its own counter when the engine cannot say, asks
the engine for text prompts only where the served folder has no tokenizer.json, and never fetches a
media part's URL: a text-only engine refuses it, naming the part, and for a model that reads images the
gate adds the tokens each image becomes, read from an inline image's header or bounded for a URL."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.sim_server import ServerInfo, SimServer
from tests.unit.gate_harness import (
    KubeletLimitsDir,
    gate_in_front_of,
    gate_metric,
    held_engine_behind_gate,
    run,
    serving,
    until,
)

LIMITS = {"maxConcurrency": 8, "concurrency": {"min": 1}, "admission": "worstCase"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": "Looks something up. " * 20,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
    for i in range(5)
]
CHAT = {"messages": [{"role": "user", "content": "Which tool?"}], "tools": TOOLS, "max_tokens": 10}
# Qwen2.5-VL's preprocessor_config.json, as the model ships it.
QWEN25_VL = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
    "patch_size": 14,
    "merge_size": 2,
    "temporal_patch_size": 2,
    "min_pixels": 3136,
    "max_pixels": 12845056,
}
SGLANG_COUNT = 3454  # what the engine answers for CHAT (a stand-in number: the engine's word is taken)


def _limits(tmp_path: Path) -> KubeletLimitsDir:
    limits = KubeletLimitsDir(tmp_path)
    limits.write(LIMITS)
    return limits


def test_a_chat_prompt_is_reserved_at_the_engines_count(tmp_path):
    async def scenario() -> None:
        async with held_engine_behind_gate(_limits(tmp_path)) as (engine, gate, url, session):
            engine.max_total_num_tokens = 100_000
            await until(lambda: (gate.admission.token_budget or 0) > 50_000, "the engine's capacity")
            engine.tokenize_count = SGLANG_COUNT
            held = asyncio.create_task(session.post(url + "/v1/chat/completions", json=CHAT))
            await until(lambda: engine.running == 1, "the chat admitted")
            # worstCase: the prompt as the engine counts it, plus the request's whole output limit.
            assert gate.admission.in_flight_tokens == SGLANG_COUNT + 10
            assert engine.tokenized == [CHAT]  # the whole request: its tools reach the template
            assert await gate_metric(session, url, "kvant_gate_prompt_counts_total", by="engine") == 1
            engine.release.set()
            (await held).close()

    run(scenario())


def test_without_the_engines_count_the_gate_counts_the_tools_itself(tmp_path):
    async def scenario() -> None:
        async with held_engine_behind_gate(_limits(tmp_path)) as (engine, gate, url, session):
            engine.max_total_num_tokens = 100_000
            await until(lambda: (gate.admission.token_budget or 0) > 50_000, "the engine's capacity")
            held = asyncio.create_task(session.post(url + "/v1/chat/completions", json=CHAT))
            await until(lambda: engine.running == 1, "the chat admitted")
            without_tools = gate.counter.chat({"messages": CHAT["messages"]})
            # The bytes estimate (no tokenizer here) counts the tools' JSON too: well over the message.
            assert gate.admission.in_flight_tokens - 10 > without_tools + 600
            assert await gate_metric(session, url, "kvant_gate_prompt_counts_total", by="gate") == 1
            engine.release.set()
            (await held).close()

    run(scenario())


def test_text_prompts_are_the_engines_to_count_only_without_a_tokenizer(tmp_path):
    async def scenario() -> None:
        async with held_engine_behind_gate(_limits(tmp_path)) as (engine, gate, url, session):
            engine.max_total_num_tokens = 100_000
            await until(lambda: (gate.admission.token_budget or 0) > 50_000, "the engine's capacity")
            engine.tokenize_count = [700, 900]  # a SentencePiece model counts what bytes cannot
            body = {"text": ["a" * 40, "b" * 40], "sampling_params": {"max_new_tokens": 10}}
            held = asyncio.create_task(session.post(url + "/generate", json=body))
            await until(lambda: engine.running == 1, "the batch admitted")
            assert gate.admission.in_flight_tokens == 700 + 900 + 2 * 10
            assert engine.tokenized == [{"prompt": body["text"]}]
            engine.release.set()
            (await held).close()

    run(scenario())


def test_an_image_url_is_refused_by_a_text_model_and_never_fetched(tmp_path):
    """Through the gate to the simulator (a text-only engine): 400 naming the part, as SGLang's, and
    the URL's server sees no connection from either."""
    connections: list[Any] = []
    with _watched_url(connections) as image:
        _refused_by_a_text_model(tmp_path, image)
    assert connections == []


def _refused_by_a_text_model(tmp_path: Path, image: str) -> None:
    parts = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": image}}]
    body = {"messages": [{"role": "user", "content": parts}], "max_tokens": 8}
    config = EngineConfig(kv_tokens=4096, max_running_requests=8, context_length=2048)
    engine = SimServer(Engine(config), ServerInfo("tiny"))

    async def scenario() -> None:
        async with (
            serving(engine.app()) as engine_url,
            gate_in_front_of(engine_url, _limits(tmp_path)) as (_gate, url),
            aiohttp.ClientSession() as session,
        ):
            async with session.post(url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 400
                answer = await resp.json()
            assert "unsupported content type 'image_url'" in str(answer), answer

    run(scenario())


def _png(width: int, height: int) -> str:
    from PIL import Image  # noqa: PLC0415

    data = io.BytesIO()
    Image.new("RGB", (width, height), (40, 90, 160)).save(data, format="PNG")
    return "data:image/png;base64," + base64.b64encode(data.getvalue()).decode()


def test_a_model_that_reads_images_reserves_their_tokens_without_fetching_one(tmp_path):
    """Qwen2.5-VL's processor: the engine's count holds each image's placeholder; the gate adds what the
    image becomes, exact for an inline image (read from its header) and the most any image can become
    for a URL, which nobody fetches."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "preprocessor_config.json").write_text(json.dumps(QWEN25_VL))
    connections: list[Any] = []
    with _watched_url(connections) as url:
        _reserved_without_fetching(tmp_path, folder, url)
    assert connections == []


def _reserved_without_fetching(tmp_path: Path, folder: Path, url: str) -> None:
    parts = [
        {"type": "text", "text": "Compare them."},
        {"type": "image_url", "image_url": {"url": _png(640, 480)}},
        {"type": "image_url", "image_url": url},
    ]
    body = {"messages": [{"role": "user", "content": parts}], "max_tokens": 10}
    inline = (476 // 28) * (644 // 28)  # the processor resizes to multiples of 28 (476 x 644), a token each
    most = 12845056 // 28**2  # QWEN25_VL's max_pixels in 28-pixel patches

    async def scenario() -> None:
        async with held_engine_behind_gate(_limits(tmp_path), tokenizer=folder) as (
            engine,
            gate,
            url_,
            session,
        ):
            engine.max_total_num_tokens = 100_000
            await until(lambda: (gate.admission.token_budget or 0) > 50_000, "the engine's capacity")
            engine.tokenize_count = 40  # the text and two placeholders, as SGLang's /v1/tokenize counts
            held = asyncio.create_task(session.post(url_ + "/v1/chat/completions", json=body))
            await until(lambda: engine.running == 1, "the chat admitted")
            assert gate.admission.in_flight_tokens == 40 + inline + most + 10
            engine.release.set()
            (await held).close()

    run(scenario())


@contextmanager
def _watched_url(connections: list[Any]) -> Iterator[str]:
    """An image URL on a loopback listener that records every connection it is offered."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connections.append(listener.accept()[0])
            except TimeoutError:
                continue

    watcher = threading.Thread(target=accept, daemon=True)
    watcher.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/cat.png"
    finally:
        stop.set()
        watcher.join(timeout=5)
        listener.close()
