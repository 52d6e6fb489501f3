"""What counting prompts with the model's tokenizer costs the gate, per request.

The gate costs every generating request before admitting it (`kvant_runtime.request_cost`). With the
served folder's tokenizer it encodes text prompts and renders chat messages through the model's chat
template (`kvant_runtime.prompt_counter.ModelTokenizer`); without one it counts bytes. This times
both on the same request bodies (the tiny chat model's 2,048-entry BPE, so a real tokenizer of
150K entries costs more per token; the time grows with the prompt), in one process, best of
`--repeat` rounds, and prints the tokenizer's cost per request against the bytes estimate and
against the gate's whole CPU per request measured by `bench/gate/latency.py` (542 µs).

With `--engine`, it also starts the real SGLang engine on the same model (CPU backend, as
`bench/protection/real_engine.py` does) and times what the gate now does for every chat request: ask
the engine's `/v1/tokenize` over loopback, on one kept-alive connection as the gate's session does.
Against it, in the same run: the gate's own count of the same body, and the engine's time to the
first token of the same chat with `max_tokens` 1 (the request the count guards). Median and p95 of
`--calls` sequential calls each, the engine idle otherwise.

    python bench/gate/token_count.py [--repeat 5] [--engine] [--calls 50]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvant_dev.tinychat import ensure_tiny_chat_model
from kvant_runtime.prompt_counter import ByteEstimate, ModelTokenizer, PromptCounter
from kvant_runtime.request_cost import cost_request

# Run by path, the bench has its own folder on sys.path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.real_engine import real_engine

GATE_CPU_PER_REQUEST_US = 542.0  # bench/README.md, Gate: non-streaming /generate on a quiet machine
SENTENCE = "The harbour wakes before the town does, and the boats round the breakwater in the grey light. "


def bodies(words: int) -> dict[str, bytes]:
    text = (SENTENCE * (words // 18 + 1))[: words * 6]
    chat = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]}
    return {
        "generate": json.dumps({"text": text, "sampling_params": {"max_new_tokens": 64}}).encode(),
        "chat": json.dumps({**chat, "max_tokens": 64}).encode(),
    }


def per_request_us(counter: PromptCounter, path: str, body: bytes, repeat: int) -> float:
    run: Callable[[], object] = lambda: cost_request(path, body, 256, counter)  # noqa: E731
    best = float("inf")
    for _ in range(repeat):
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < 0.3:
            run()
            count += 1
        best = min(best, (time.perf_counter() - started) / count)
    return best * 1e6


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"lookup_{i}",
            "description": "Looks up records of one kind in the archive, newest first. " * 6,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
    for i in range(8)
]


def chat_bodies() -> dict[str, dict[str, object]]:
    question = [{"role": "user", "content": "Find the last three reports about the harbour."}]
    prose = [{"role": "user", "content": SENTENCE * 40}]
    return {
        "short chat": {"messages": question},
        "chat + 8 tools": {"messages": question, "tools": TOOLS},
        "long chat": {"messages": prose},
    }


def timed(
    connection: http.client.HTTPConnection, path: str, body: dict[str, object]
) -> tuple[float, dict[str, Any]]:
    """Milliseconds for one call, and its answer."""
    payload = json.dumps(body).encode()
    started = time.perf_counter()
    connection.request("POST", path, payload, {"Content-Type": "application/json"})
    response = connection.getresponse()
    answer = response.read()
    elapsed = (time.perf_counter() - started) * 1e3
    if response.status != 200:
        raise SystemExit(f"{path} answered {response.status}: {answer[:300]!r}")
    return elapsed, json.loads(answer)


def unique(body: dict[str, object], call: int) -> dict[str, object]:
    """`body` with the call's number first in its last message, so no call finds its prompt in the
    engine's radix cache (the first token then includes the whole prefill, as a new request's does)."""
    messages = [dict(m) for m in body["messages"]]  # type: ignore[attr-defined]
    messages[-1]["content"] = f"{call}. {messages[-1]['content']}"
    return {**body, "messages": messages, "model": "bench"}


def engine_rows(calls: int) -> None:
    """The engine's /v1/tokenize against the gate's own count and the engine's first token."""
    model = ensure_tiny_chat_model()
    counter = ModelTokenizer(model)
    workdir = Path(tempfile.mkdtemp(prefix="kvant-bench-token-count-"))
    with real_engine(model, 16384, workdir) as url:
        host, port = url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=120)
        print()
        print("| request | prompt tokens (engine) | engine /v1/tokenize median (p95) | gate's own count | "
              "first token, max_tokens 1, median | tokenize ÷ first token |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for name, body in chat_bodies().items():
            tokenize = [timed(connection, "/v1/tokenize", unique(body, i)) for i in range(calls)]
            first = sorted(
                timed(connection, "/v1/chat/completions", {**unique(body, calls + i), "max_tokens": 1})[0]
                for i in range(calls)
            )
            own = per_request_us(counter, "/v1/chat/completions", json.dumps(body).encode(), 3) / 1e3
            times = sorted(t for t, _ in tokenize)
            median, p95 = statistics.median(times), times[int(0.95 * (len(times) - 1))]
            print(
                f"| {name} | {tokenize[0][1].get('count')} | {median:.2f} ms ({p95:.2f}) | {own:.2f} ms | "
                f"{statistics.median(first):.1f} ms | {median / statistics.median(first):.3f} |"
            )
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--engine", action="store_true", help="also time the real engine's /v1/tokenize")
    parser.add_argument("--calls", type=int, default=50, help="calls per request kind with --engine")
    args = parser.parse_args()
    exact, estimate = ModelTokenizer(ensure_tiny_chat_model()), ByteEstimate()
    paths = {"generate": "/generate", "chat": "/v1/chat/completions"}
    print("| request | prompt tokens | bytes ÷ 4 | tokenizer | added | added ÷ gate CPU/request |")
    print("|---|---|---|---|---|---|")
    for words in (50, 500, 5000):
        for kind, body in bodies(words).items():
            tokens = cost_request(paths[kind], body, 256, exact).prompt_tokens
            by_bytes = per_request_us(estimate, paths[kind], body, args.repeat)
            by_tokenizer = per_request_us(exact, paths[kind], body, args.repeat)
            added = by_tokenizer - by_bytes
            print(
                f"| {kind} | {tokens} | {by_bytes:.0f} µs | {by_tokenizer:.0f} µs | {added:+.0f} µs | "
                f"{added / GATE_CPU_PER_REQUEST_US:.2f} |"
            )
    if args.engine:
        engine_rows(args.calls)


if __name__ == "__main__":
    main()
