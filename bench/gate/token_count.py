"""What counting prompts with the model's tokenizer costs the gate, per request.

The gate costs every generating request before admitting it (`kvant_runtime.request_cost`). With the
served folder's tokenizer it encodes text prompts and renders chat messages through the model's chat
template (`kvant_runtime.prompt_counter.ModelTokenizer`); without one it counts bytes. This times
both on the same request bodies (the tiny chat model's 2,048-entry BPE, so a real tokenizer of
150K entries costs more per token; the time grows with the prompt), in one process, best of
`--repeat` rounds, and prints the tokenizer's cost per request against the bytes estimate and
against the gate's whole CPU per request measured by `bench/gate/latency.py` (542 µs).

    python bench/gate/token_count.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from kvant_runtime.prompt_counter import ByteEstimate, ModelTokenizer, PromptCounter
from kvant_runtime.request_cost import cost_request
from kvant_runtime.tinychat import ensure_tiny_chat_model

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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5)
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


if __name__ == "__main__":
    main()
