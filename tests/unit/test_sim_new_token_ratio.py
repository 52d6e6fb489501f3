"""The simulator's new_token_ratio follows SGLang's scheduler: it plans for part of each running
request's remaining output, decays while decode goes well, jumps after a retraction, resets when idle."""

from __future__ import annotations

import pytest

from kvant_runtime.sim.engine import (
    INIT_NEW_TOKEN_RATIO,
    MIN_NEW_TOKEN_RATIO_FACTOR,
    NEW_TOKEN_RATIO_DECAY_STEPS,
    RETRACT_DECODE_STEPS,
    Engine,
    EngineConfig,
)


def _engine(kv_tokens: int, new_token_ratio: float = INIT_NEW_TOKEN_RATIO) -> Engine:
    config = EngineConfig(kv_tokens, 64, context_length=100_000, new_token_ratio=new_token_ratio)
    return Engine(config)


def _step(engine: Engine, now: float = 0.0) -> str:
    step = engine.step(now)
    assert step is not None
    return step.kind


def test_defaults_are_sglangs():
    engine = _engine(1000)
    assert engine.new_token_ratio == INIT_NEW_TOKEN_RATIO == 0.7
    assert engine.min_new_token_ratio == pytest.approx(0.7 * 0.14)


def test_ratio_decays_one_step_per_decode_to_its_floor_and_resets_when_idle():
    engine = _engine(100_000)
    engine.submit("long", 10, 2 * NEW_TOKEN_RATIO_DECAY_STEPS, 0.0, prompt_key="long")
    assert _step(engine) == "prefill"
    assert engine.new_token_ratio == INIT_NEW_TOKEN_RATIO  # prefill does not decay it
    assert _step(engine) == "decode"
    decay = INIT_NEW_TOKEN_RATIO * (1 - MIN_NEW_TOKEN_RATIO_FACTOR) / NEW_TOKEN_RATIO_DECAY_STEPS
    assert engine.new_token_ratio == pytest.approx(INIT_NEW_TOKEN_RATIO - decay)
    for _ in range(NEW_TOKEN_RATIO_DECAY_STEPS):
        _step(engine)
    assert engine.new_token_ratio == pytest.approx(INIT_NEW_TOKEN_RATIO * MIN_NEW_TOKEN_RATIO_FACTOR)
    while engine.step(0.0) is not None:
        pass
    assert engine.new_token_ratio == INIT_NEW_TOKEN_RATIO


def test_a_running_request_reserves_ratio_of_its_remaining_output_a_new_one_all_of_it():
    for ratio, b_joins in ((0.7, True), (1.0, False)):
        engine = _engine(1000, new_token_ratio=ratio)
        engine.submit("a", 100, 500, 0.0, prompt_key="a")
        assert _step(engine) == "prefill"
        # b arrives while a runs (arriving together, it would have met a's whole 600 and the full
        # batch would admit nothing more until a leaves: test_sim_capacity_and_retraction).
        engine.submit("b", 100, 350, 0.0, prompt_key="b")
        # a now holds 100 and plans ratio x 499 more: 0.7 leaves room for b's 450, 1.0 does not.
        assert _step(engine) == ("prefill" if b_joins else "decode")
        assert ("b" in [r.rid for r in engine.running]) is b_joins


def test_a_retraction_raises_the_ratio_to_what_the_survivors_need_and_requeues_at_the_back():
    engine = _engine(300, new_token_ratio=0.0)  # running requests plan for nothing: overcommit
    engine.submit("a", 100, 80, 0.0, prompt_key="a")
    assert _step(engine) == "prefill"
    for rid in "bc":  # arriving while a runs: b is admitted beside it, c waits
        engine.submit(rid, 100, 80, 0.0, prompt_key=rid)
    now = 0.0
    while (step := engine.step(now)) is not None and not step.retracted:
        now = step.end
    assert step is not None
    assert [r.rid for r in step.retracted] == ["b"]  # fewest tokens generated
    assert [r.rid for r in engine.waiting] == ["c", "b"]  # behind the request that was waiting
    (survivor,) = engine.running
    decoded = len(survivor.output_ids) - 1  # the ratio is set before the step emits its token
    assert engine.new_token_ratio == pytest.approx((decoded + RETRACT_DECODE_STEPS) / (80 + 1))
