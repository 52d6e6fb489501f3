"""At equal memory, FP8 KV (half the bytes per token) sustains twice the long requests before a retraction."""

from __future__ import annotations

from kvant_runtime.sim.engine import Engine, EngineConfig

PROMPT, OUTPUT = 2000, 2000
# A request holds prompt + output - 1 KV slots when it finishes (the last token's KV is never written).
FOOTPRINT = PROMPT + OUTPUT - 1
KV_BUDGET_BYTES = 10 * FOOTPRINT * 70_272 + 12_345  # room for 10 long requests in BF16 MLA cells


def first_retraction_concurrency(bytes_per_token: int) -> int:
    """The smallest number of simultaneous long requests that makes the engine retract."""
    kv_tokens = KV_BUDGET_BYTES // bytes_per_token
    for concurrency in range(1, 100):
        engine = Engine(EngineConfig(kv_tokens=kv_tokens, max_running_requests=256, context_length=32768))
        for i in range(concurrency):
            engine.submit(f"r{i}", PROMPT, OUTPUT, 0.0, prompt_key=str(i))
        now, retracted = 0.0, 0
        while (step := engine.step(now)) is not None and not retracted:
            now, retracted = step.end, len(step.retracted)
        if retracted:
            return concurrency
    raise AssertionError("no retraction up to 99 concurrent requests")


def test_fp8_kv_sustains_twice_the_concurrent_long_requests():
    bf16 = first_retraction_concurrency(70_272) - 1
    fp8 = first_retraction_concurrency(35_136) - 1
    assert bf16 == 10
    assert fp8 == 2 * bf16
