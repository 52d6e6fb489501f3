"""The simulator's HTTP API: the parts of SGLang's that clients, the gate and Prometheus use.

- `POST /generate`: SGLang's native API (`text` or `input_ids`, `sampling_params`,
  `stream`); streamed chunks carry the text so far, as SGLang's do: one for the first token,
  then one every `stream_interval` tokens (SGLang's `--stream-interval`), and one at the end.
  A batch (a list of prompts) or parallel samples (`n`) run one sequence each and answer with
  a list, as SGLang does; the samples of one prompt share its KV, so after the first each holds
  (and reports as `prompt_tokens`) a single token. Such requests are answered whole, not streamed.
- `POST /v1/completions`, `POST /v1/chat/completions`: OpenAI-compatible, with
  SSE streaming; a final usage chunk when `stream_options.include_usage` is set.
- Prefill/decode (`disaggregation_mode`): requests carry the router's bootstrap fields; see
  `kvant_runtime.sim.pd_handoff`, the stand-in for SGLang's KV transfer.
- `GET /health`, `GET /health_generate` (runs a one-token request),
  `GET /get_model_info`, `GET /get_server_info` (with `max_total_num_tokens`),
  `GET /v1/models`, `GET /metrics`, `GET /v1/loads` (a published snapshot, `load_snapshot`).
- `POST /v1/tokenize`: the prompt counts the gate asks for (`kvant_runtime.sim.tokenize_route`).
- `POST /load_lora_adapter`, `POST /unload_lora_adapter`, and a request's adapter (`model:
  "BASE:ADAPTER"` or `lora_path`): the stand-in for SGLang's LoRA (`kvant_runtime.sim.adapters`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_runtime.prompt_counter import ByteEstimate, PromptCounter
from kvant_runtime.request_cost import output_limit, prompt_tokens, refuse_media_for_text_model, samples
from kvant_runtime.sim.adapters import AdapterRegistry, add_adapter_routes
from kvant_runtime.sim.answers import (
    ChoiceFormat,
    chat_choice,
    close_sse,
    completion_choice,
    finish_reason,
    meta_info,
    open_sse,
    send_sse,
    usage,
)
from kvant_runtime.sim.engine import Engine
from kvant_runtime.sim.pd_handoff import Bootstrap, HandoffBoard, fetch_handoff
from kvant_runtime.sim.realtime import RealTimeEngine, Stream
from kvant_runtime.sim.request_io import bad_requests_as_json, read_json
from kvant_runtime.sim.sim_metrics import EngineMetrics
from kvant_runtime.sim.text import detokenize
from kvant_runtime.sim.tokenize_route import tokenize_answer
from kvant_runtime.tokens import DEFAULT_MAX_NEW_TOKENS

SGLANG_API_VERSION = "0.5.23"


@dataclass(frozen=True)
class ServerInfo:
    """What the info endpoints report besides the engine's own configuration."""

    model_name: str
    kv_cache_dtype: str = KvCacheDtype.AUTO.value
    page_size: int = 1
    disaggregation_mode: str = "null"  # SGLang's --disaggregation-mode: null, prefill or decode
    bootstrap: tuple[str, int] | None = None  # a prefill's bootstrap server (host, port)
    stream_interval: int = 1  # SGLang's --stream-interval: tokens per streamed chunk after the first


class SimServer:
    def __init__(
        self,
        engine: Engine,
        info: ServerInfo,
        counter: PromptCounter | None = None,
        adapters: AdapterRegistry | None = None,
    ) -> None:
        self.info = info
        self.adapters = adapters or AdapterRegistry(None)
        # The served model's tokenizer where its folder has one (`--tokenizer`), as SGLang counts.
        self.counter = counter or ByteEstimate()
        self.registry = CollectorRegistry()
        self.runner = RealTimeEngine(
            engine, EngineMetrics(info.model_name, self.registry), SGLANG_API_VERSION
        )
        self._loop_task: asyncio.Task[None] | None = None
        self.handoffs = HandoffBoard()
        self._bootstrap_runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[bad_requests_as_json])
        app.router.add_post("/generate", self.generate)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_post("/v1/tokenize", self.tokenize)
        add_adapter_routes(app, self.adapters)
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health_generate)
        app.router.add_get("/get_model_info", self.model_info)
        app.router.add_get("/model_info", self.model_info)
        app.router.add_get("/get_server_info", self.server_info)
        app.router.add_get("/server_info", self.server_info)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/loads", self.runner.loads.serve)
        app.on_startup.append(self._start_engine)
        app.on_cleanup.append(self._stop_engine)
        return app

    async def _start_engine(self, _app: web.Application) -> None:
        self._loop_task = asyncio.create_task(self.runner.run())
        if self.info.disaggregation_mode == "prefill" and self.info.bootstrap is not None:
            # SGLang binds its bootstrap server to the engine's own host, as here.
            self._bootstrap_runner = web.AppRunner(self.handoffs.app(), access_log=None)
            await self._bootstrap_runner.setup()
            await web.TCPSite(self._bootstrap_runner, *self.info.bootstrap).start()

    async def _stop_engine(self, _app: web.Application) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
        if self._bootstrap_runner is not None:
            await self._bootstrap_runner.cleanup()

    # --- generation endpoints -------------------------------------------

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await read_json(request)
        streams = await self._submit(body, key=body.get("input_ids") or body.get("text"), native=True)
        if len(streams) > 1:  # a batch, or parallel samples: SGLang answers with a list
            results = [
                {"text": detokenize(ids), "output_ids": ids, "meta_info": meta_info(stream)}
                for stream, ids in zip(streams, await self._collect_all(streams), strict=True)
            ]
            return web.json_response(results)
        stream = streams[0]
        if not body.get("stream"):
            ids: list[int] = await collect(self.runner, stream)
            return web.json_response(
                {"text": detokenize(ids), "output_ids": ids, "meta_info": meta_info(stream)}
            )
        response = await open_sse(request)
        ids = []
        async for batch in chunks_of(self.runner, stream, self.info.stream_interval):
            ids += batch
            chunk = {"text": detokenize(ids), "output_ids": ids, "meta_info": meta_info(stream)}
            await send_sse(response, chunk)
        return await close_sse(response)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await read_json(request)
        streams = await self._submit(body, key=body.get("prompt"))
        return await self._openai(request, body, streams, "text_completion", completion_choice)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await read_json(request)
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            raise ValueError("'messages' must be a non-empty list of {role, content} objects")
        refuse_media_for_text_model(body)  # a text-only model, as SGLang refuses it
        streams = await self._submit(body, key=body["messages"])
        return await self._openai(request, body, streams, "chat.completion", chat_choice)

    async def tokenize(self, request: web.Request) -> web.Response:
        limit = self.runner.engine.config.context_length
        return web.json_response(tokenize_answer(await read_json(request), self.counter, limit))

    async def _submit(self, body: dict[str, Any], key: object, native: bool = False) -> list[Stream]:
        """One sequence per prompt of a batch and per parallel sample (`n`), costed by the same rules
        as the gate's (`kvant_runtime.request_cost`). Parallel samples of one prompt share its KV
        (SGLang's radix cache holds the prefix once), so only the first sample holds the prompt."""
        adapter = self.adapters.resolve(body, self.info.model_name, native)  # never loaded: a 400
        prompts, parallel = prompt_tokens(body, self.counter), samples(body)
        limit = output_limit(body)
        limit = DEFAULT_MAX_NEW_TOKENS if limit is None else limit
        streaming = bool(body.get("stream"))
        params = body.get("sampling_params")
        sampling: dict[str, Any] = params if isinstance(params, dict) else {}
        ignore_eos = bool(sampling.get("ignore_eos", body.get("ignore_eos", False)))
        if streaming and len(prompts) * parallel > 1:
            raise ValueError(
                "the simulator streams one sequence per request; send batches and n > 1 unstreamed"
            )
        if self.info.disaggregation_mode != "null":
            if len(prompts) * parallel != 1:
                raise ValueError("the simulator disaggregates one prompt per request (no batches, n = 1)")
            seed = json.dumps(key, sort_keys=True)
            sampled = (limit, streaming, ignore_eos)
            return [await self._submit_disaggregated(body, seed, prompts[0], sampled, adapter)]
        streams = []
        for i, tokens in enumerate(prompts):
            for j in range(parallel):
                seed = json.dumps(key if (i, j) == (0, 0) else [key, i, j], sort_keys=True)
                held = tokens if j == 0 else 1
                streams.append(
                    self.runner.submit(held, limit, seed, streaming, ignore_eos=ignore_eos, adapter=adapter)
                )
        return streams

    async def _submit_disaggregated(
        self,
        body: dict[str, Any],
        seed: str,
        prompt: int,
        sampled: tuple[int, bool, bool],
        adapter: str | None,
    ) -> Stream:
        """A prefill runs the prompt (one token, as SGLang's does) and hands it to the room; a decode
        takes the room's prompt KV from its prefill and generates."""
        mode, (limit, streaming, ignore_eos) = self.info.disaggregation_mode, sampled
        bootstrap = Bootstrap.from_body(body)
        if bootstrap is None:
            raise ValueError(
                f"a {mode} server serves requests that carry bootstrap_host, bootstrap_port and "
                "bootstrap_room: send them through the router"
            )
        if mode == "prefill":
            room, handoffs = bootstrap.room, self.handoffs
            return self.runner.submit(
                prompt,
                1,
                seed,
                streaming,
                ignore_eos=True,
                on_finish=lambda request: handoffs.publish(room, request.prompt_tokens),
                adapter=adapter,
            )
        held = await fetch_handoff(bootstrap)
        return self.runner.submit(
            held, limit, seed, streaming, ignore_eos=ignore_eos, kv_transferred=True, adapter=adapter
        )

    async def _collect_all(self, streams: list[Stream]) -> list[list[int]]:
        return list(await asyncio.gather(*(collect(self.runner, s) for s in streams)))

    async def _openai(
        self,
        request: web.Request,
        body: dict[str, Any],
        streams: list[Stream],
        kind: str,
        choice: ChoiceFormat,
    ) -> web.StreamResponse:
        stream = streams[0]
        head = {"id": stream.request.rid, "created": int(time.time()), "model": self.info.model_name}
        if not body.get("stream"):
            outputs = await self._collect_all(streams)
            choices = [
                {**choice(ids, False, finish_reason(s)), "index": index}
                for index, (s, ids) in enumerate(zip(streams, outputs, strict=True))
            ]
            totals = [usage(s) for s in streams]
            summed = {key: sum(u[key] for u in totals) for key in ("prompt_tokens", "completion_tokens")}
            summed["total_tokens"] = summed["prompt_tokens"] + summed["completion_tokens"]
            return web.json_response({**head, "object": kind, "choices": choices, "usage": summed})
        response = await open_sse(request)
        chunk_head = {**head, "object": f"{kind}.chunk" if kind == "chat.completion" else kind}
        async for batch in chunks_of(self.runner, stream, self.info.stream_interval):
            await send_sse(response, {**chunk_head, "choices": [choice(batch, True, None)]})
        await send_sse(response, {**chunk_head, "choices": [choice([], True, finish_reason(stream))]})
        if (body.get("stream_options") or {}).get("include_usage"):
            await send_sse(response, {**chunk_head, "choices": [], "usage": usage(stream)})
        return await close_sse(response)

    # --- health and info ------------------------------------------------

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def health_generate(self, _request: web.Request) -> web.Response:
        stream = self.runner.submit(1, 1, "health_generate", is_streaming=False)
        await collect(self.runner, stream)
        return web.Response(status=200)

    async def model_info(self, _request: web.Request) -> web.Response:
        name = self.info.model_name
        return web.json_response(
            {
                "model_path": name,
                "served_model_name": name,
                "tokenizer_path": None,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "disaggregation_mode": self.info.disaggregation_mode,
            }
        )

    async def server_info(self, _request: web.Request) -> web.Response:
        engine = self.runner.engine
        config = engine.config
        return web.json_response(
            {
                "model_path": self.info.model_name,
                "served_model_name": self.info.model_name,
                "tp_size": 1,
                "kv_cache_dtype": self.info.kv_cache_dtype,
                "page_size": self.info.page_size,
                "context_length": config.context_length,
                "max_running_requests": config.max_running_requests,
                "max_prefill_tokens": config.max_prefill_tokens,
                "stream_interval": self.info.stream_interval,
                "random_seed": config.seed,
                "max_total_num_tokens": config.kv_tokens,
                "max_req_input_len": min(config.context_length, config.kv_tokens) - 1,
                "internal_states": [{"max_total_num_tokens": config.kv_tokens}],
                "version": f"{SGLANG_API_VERSION} (kvant engine simulator)",
            }
        )

    async def models(self, _request: web.Request) -> web.Response:
        config = self.runner.engine.config
        name = self.info.model_name
        model = {"id": name, "object": "model", "created": 0, "owned_by": "kvant-sim"}
        cards = [{**model, "max_model_len": config.context_length}, *self.adapters.model_cards(name)]
        return web.json_response({"object": "list", "data": cards})

    async def metrics(self, _request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )


async def tokens_of(runner: RealTimeEngine, stream: Stream) -> AsyncIterator[int]:
    """The request's tokens as they are generated; aborts the request if the consumer stops early."""
    try:
        while (token := await stream.tokens.get()) is not None:
            yield token
    finally:
        runner.abort(stream)


async def chunks_of(runner: RealTimeEngine, stream: Stream, interval: int) -> AsyncIterator[list[int]]:
    """The tokens as SGLang streams them: the first alone (time to first token is what clients
    watch), then `interval` at a time, then whatever is left when the sequence ends."""
    pending: list[int] = []
    sent = 0
    async for token in tokens_of(runner, stream):
        pending.append(token)
        if sent == 0 or len(pending) >= interval:
            sent += len(pending)
            yield pending
            pending = []
    if pending:
        yield pending


async def collect(runner: RealTimeEngine, stream: Stream) -> list[int]:
    return [token async for token in tokens_of(runner, stream)]
