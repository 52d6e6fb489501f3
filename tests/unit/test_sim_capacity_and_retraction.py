"""The simulated scheduler honours its KV capacity and retracts when decode runs out of KV."""

from __future__ import annotations

import random

import pytest

from kvant_runtime.sim.engine import Engine, EngineConfig, RequestRejected, StepResult


def run_to_completion(engine: Engine, on_step=None) -> float:
    now = 0.0
    while (step := engine.step(now)) is not None:
        now = step.end
        if on_step is not None:
            on_step(step)
    return now


def test_kv_and_batch_bounds_hold_at_every_step_and_every_request_completes():
    engine = Engine(EngineConfig(kv_tokens=3000, max_running_requests=6, context_length=4096, seed=1))
    rng = random.Random(7)
    requests = [
        engine.submit(f"r{i}", rng.randint(10, 900), rng.randint(1, 400), 0.0, prompt_key=str(i))
        for i in range(60)
    ]
    peak_used = 0

    def check(step):
        nonlocal peak_used
        assert 0 <= engine.used_kv_tokens <= 3000
        assert engine.used_kv_tokens == sum(r.kv_tokens for r in engine.running)
        assert len(engine.running) <= 6
        peak_used = max(peak_used, engine.used_kv_tokens)

    run_to_completion(engine, check)
    assert all(len(r.output_ids) == r.max_new_tokens for r in requests)
    assert engine.used_kv_tokens == 0
    assert peak_used > 2000  # the workload did press on the capacity


def overcommitting_engine() -> Engine:
    # new_token_ratio=0: a running request reserves none of its remaining output, so the second of
    # two requests of 100 prompt tokens growing to 100 + 80 is admitted, and together they outgrow
    # 300 tokens.
    return Engine(
        EngineConfig(kv_tokens=300, max_running_requests=8, context_length=1000, new_token_ratio=0.0)
    )


def test_retracted_request_returns_to_the_queue_loses_its_kv_and_still_finishes():
    engine = overcommitting_engine()
    first = engine.submit("a", 100, 80, 0.0, prompt_key="a")
    second = engine.submit("b", 100, 80, 0.0, prompt_key="b")
    retracted = []
    run_to_completion(engine, lambda step: retracted.extend(step.retracted))
    assert retracted, "the cache ran out mid-decode, so a request must have been retracted"
    victim = retracted[0]
    assert victim.retractions >= 1
    assert engine.retracted_total == len(retracted)
    assert len(first.output_ids) == len(second.output_ids) == 80


def first_retraction(engine: Engine) -> StepResult:
    """Two requests that outgrow `overcommitting_engine`'s cache, stepped until one is retracted."""
    engine.submit("a", 100, 80, 0.0, prompt_key="a")
    engine.submit("b", 100, 80, 0.0, prompt_key="b")
    now = 0.0
    while (step := engine.step(now)) is not None and not step.retracted:
        now = step.end
    assert step is not None
    return step


def test_a_retracted_request_frees_its_kv_immediately():
    engine = overcommitting_engine()
    victim = first_retraction(engine).retracted[0]
    assert victim.kv_tokens == 0
    assert engine.waiting[0] is victim
    assert engine.used_kv_tokens == sum(r.kv_tokens for r in engine.running) <= 300


def test_admission_waits_for_free_kv_instead_of_overcommitting_prompts():
    engine = Engine(EngineConfig(kv_tokens=1000, max_running_requests=8, context_length=2000))
    for i in range(3):
        engine.submit(f"r{i}", 400, 10, 0.0, prompt_key=str(i))
    engine.step(0.0)
    assert len(engine.running) == 2 and len(engine.waiting) == 1  # 3 x 400 prompt tokens do not fit 1000


def test_request_larger_than_the_cache_is_rejected_with_the_numbers():
    engine = Engine(EngineConfig(kv_tokens=1000, max_running_requests=8, context_length=4096))
    with pytest.raises(RequestRejected, match=r"needs 1100 KV tokens, more than the whole KV cache \(1000"):
        engine.submit("big", 1000, 100, 0.0, prompt_key="big")


def test_same_seed_same_text_and_other_seed_other_text():
    def outputs(seed: int) -> list[list[int]]:
        engine = Engine(EngineConfig(kv_tokens=5000, max_running_requests=4, context_length=4096, seed=seed))
        requests = [engine.submit(f"r{i}", 50, 20, 0.0, prompt_key=f"p{i}") for i in range(6)]
        run_to_completion(engine)
        return [r.output_ids for r in requests]

    assert outputs(3) == outputs(3)
    assert outputs(3) != outputs(4)


def test_decode_steps_grow_with_batch_and_context():
    durations = {}
    for batch, prompt in ((1, 100), (8, 100), (8, 2000)):
        engine = Engine(EngineConfig(kv_tokens=100_000, max_running_requests=64, context_length=4096))
        for i in range(batch):
            engine.submit(f"r{i}", prompt, 4, 0.0, prompt_key=str(i))
        engine.step(0.0)  # prefill
        decode = engine.step(1.0)
        assert decode is not None
        durations[(batch, prompt)] = decode.duration
    assert durations[(1, 100)] < durations[(8, 100)] < durations[(8, 2000)]


def test_a_retraction_costs_a_re_prefill_of_the_prompt_and_every_token_generated_so_far():
    # SGLang keeps a retracted request's output and recomputes its KV on re-admission: prompt plus
    # generated tokens, at prefill cost. The simulator charges exactly that, no more, no less.
    engine = overcommitting_engine()
    step: StepResult | None = first_retraction(engine)
    assert step is not None
    victim, generated = step.retracted[0], len(step.retracted[0].output_ids)
    assert generated > 0
    now = step.end
    while (step := engine.step(now)) is not None and not (step.kind == "prefill" and victim.kv_tokens):
        now = step.end
    assert step is not None and step.kind == "prefill"
    assert step.prefill_tokens == 100 + generated
    assert step.duration == pytest.approx(engine.config.cost.prefill_seconds(100 + generated))
