"""A CPU profile for the simulator, fitted to the real engine on this machine, in the same run.

The simulator's cost model (`kvant_runtime.sim.cost`) times a decode step as a base, a cost per
running request and a cost per context token read, and a prefill as a cost per prompt token. Its
defaults describe a GPU. This measures the real SGLang engine (CPU backend, the tiny chat model) and
fits the same terms, so the simulator beside it runs on the engine's clock:

- decode: B streams decoding together (a short or a longer prompt, exactly `DECODE_TOKENS` new tokens
  each, all inside the cache so none waits or is retracted); the step time is the median gap between
  successive tokens of the streams while all B run.
  Least squares over (B, context tokens) gives the base, the per-request and the per-context-token
  terms; the last becomes the simulator's KV read bandwidth for the model's KV bytes per token.
- prefill: one request at a time with `max_new_tokens` 1, prompts of two lengths; the time to the
  answer's slope over the prompt tokens is the per-token prefill cost. Its fixed part is the decode
  base: both are one forward pass of the same model (the intercept of the prefill line would carry
  the HTTP round trip and the tokenizer process besides).

The fit is printed with its residuals, so a profile that does not describe the engine says so.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass

import aiohttp
import numpy as np

DECODE_TOKENS = 48
# (sentences per prompt, batch sizes): every batch's prompts and answers fit a 4,096-token cache.
DECODE_POINTS = ((1, (1, 4, 16, 32)), (8, (1, 4, 12)))
SENTENCE = "The harbour wakes before the town does, and the boats round the breakwater in the grey light. "


@dataclass(frozen=True)
class CpuProfile:
    decode_base_ms: float
    decode_per_request_ms: float
    kv_read_gbps: float
    prefill_per_token_us: float
    residual_ms: float  # the decode fit's root-mean-square error

    def sim_flags(self, kv_bytes_per_token: int) -> list[str]:
        return [
            "--decode-base-ms", f"{self.decode_base_ms:.4f}",
            "--decode-per-request-ms", f"{self.decode_per_request_ms:.4f}",
            "--kv-bytes-per-token", str(kv_bytes_per_token),
            "--kv-read-gbps", f"{self.kv_read_gbps:.6f}",
            "--prefill-per-token-us", f"{self.prefill_per_token_us:.3f}",
            "--prefill-base-ms", f"{self.decode_base_ms:.4f}",  # one forward pass's fixed part
        ]  # fmt: skip


async def fit(engine: str, kv_bytes_per_token: int) -> tuple[CpuProfile, list[dict[str, float]]]:
    """The profile, and the measured points it was fitted to."""
    points: list[dict[str, float]] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        for sentences, batches in DECODE_POINTS:
            for batch in batches:
                step, context = await _decode_step(session, engine, batch, SENTENCE * sentences)
                points.append({"batch": batch, "context": context, "step_ms": step * 1e3})
        prefill = await _prefill_per_token(session, engine)
    design = np.array([[1.0, p["batch"], p["context"]] for p in points])
    measured = np.array([p["step_ms"] for p in points])
    (base, per_request, per_context), *_ = np.linalg.lstsq(design, measured, rcond=None)
    residual = float(np.sqrt(np.mean((design @ np.array([base, per_request, per_context]) - measured) ** 2)))
    per_context = max(float(per_context), 1e-9)  # ms per context token; a bandwidth in GB/s for the sim
    gbps = kv_bytes_per_token / (per_context / 1e3) / 1e9
    profile = CpuProfile(max(float(base), 0.0), max(float(per_request), 0.0), gbps, prefill * 1e6, residual)
    return profile, points


async def _decode_step(
    session: aiohttp.ClientSession, engine: str, batch: int, prompt: str
) -> tuple[float, float]:
    """The median decode step while `batch` streams run together, and their context tokens then."""
    gaps: list[list[float]] = [[] for _ in range(batch)]
    prompts: list[int] = [0] * batch

    async def stream(index: int) -> None:
        body = {
            "text": f"{index}. {prompt}",
            "stream": True,
            "sampling_params": {"max_new_tokens": DECODE_TOKENS, "min_new_tokens": DECODE_TOKENS},
        }
        last = None
        async with session.post(f"{engine}/generate", json=body) as response:
            async for line in response.content:
                if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                    continue
                now = time.perf_counter()
                prompts[index] = json.loads(line[5:])["meta_info"]["prompt_tokens"]
                if last is not None:
                    gaps[index].append(now - last)
                last = now

    await asyncio.gather(*(stream(i) for i in range(batch)))
    # The middle of each stream: all `batch` ran together there (the first tokens wait on the others'
    # prefill, the last on the stragglers).
    middle = [
        g for stream_gaps in gaps for g in stream_gaps[len(stream_gaps) // 4 : 3 * len(stream_gaps) // 4]
    ]
    context = sum(prompts) + batch * DECODE_TOKENS / 2
    return statistics.median(middle), context


async def _prefill_per_token(session: aiohttp.ClientSession, engine: str) -> float:
    """Seconds per prompt token: the slope of a one-token answer's time over the prompt's length."""
    timings: dict[int, list[float]] = {}
    for sentences in (2, 40):
        for index in range(5):
            body = {"text": f"{index}. {SENTENCE * sentences}", "sampling_params": {"max_new_tokens": 1}}
            started = time.perf_counter()
            async with session.post(f"{engine}/generate", json=body) as response:
                answer = await response.json()
            tokens = answer["meta_info"]["prompt_tokens"]
            timings.setdefault(tokens, []).append(time.perf_counter() - started)
    (short, short_times), (long, long_times) = sorted(timings.items())[0], sorted(timings.items())[-1]
    return max((statistics.median(long_times) - statistics.median(short_times)) / (long - short), 0.0)
