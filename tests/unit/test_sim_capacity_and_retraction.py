"""The simulated scheduler honours its KV capacity and retracts when decode runs out of KV."""

from __future__ import annotations

import random

import pytest

from kvant_cli.main import main
from kvant_runtime.sim.cost import CostModel
from kvant_runtime.sim.engine import Engine, EngineConfig, Request, RequestRejected, StepResult


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
        # What finished in this step holds its KV until the next is scheduled (SGLang's overlap loop).
        assert engine.used_kv_tokens == sum(r.kv_tokens for r in [*engine.running, *engine.leaving])
        assert len(engine.running) <= 6
        peak_used = max(peak_used, engine.used_kv_tokens)

    run_to_completion(engine, check)
    assert all(len(r.output_ids) == r.max_new_tokens for r in requests)
    assert engine.used_kv_tokens == 0
    assert peak_used > 2000  # the workload did press on the capacity


def overcommitting_engine() -> Engine:
    # new_token_ratio=0: a running request reserves none of its remaining output, so a second request
    # of 100 prompt tokens growing to 100 + 80, arriving while the first decodes, is admitted, and
    # together they outgrow 300 tokens. (Arriving together, the second would not fit beside the
    # first's whole reservation, and the full batch would admit nothing more until the first ends.)
    return Engine(
        EngineConfig(kv_tokens=300, max_running_requests=8, context_length=1000, new_token_ratio=0.0)
    )


def submit_overcommitting_pair(engine: Engine) -> tuple[Request, Request]:
    """ "a", then "b" once "a" has been prefilled: both admitted, and together they outgrow the cache."""
    first = engine.submit("a", 100, 80, 0.0, prompt_key="a")
    assert engine.step(0.0) is not None  # a's prefill
    second = engine.submit("b", 100, 80, 0.0, prompt_key="b")
    return first, second


def test_retracted_request_returns_to_the_queue_loses_its_kv_and_still_finishes():
    engine = overcommitting_engine()
    first, second = submit_overcommitting_pair(engine)
    retracted = []
    run_to_completion(engine, lambda step: retracted.extend(step.retracted))
    assert retracted, "the cache ran out mid-decode, so a request must have been retracted"
    victim = retracted[0]
    assert victim.retractions >= 1
    assert engine.retracted_total == len(retracted)
    assert len(first.output_ids) == len(second.output_ids) == 80


def first_retraction(engine: Engine) -> StepResult:
    """Two requests that outgrow `overcommitting_engine`'s cache, stepped until one is retracted."""
    submit_overcommitting_pair(engine)
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


def test_a_request_that_did_not_fit_waits_until_a_request_leaves_the_batch():
    # SGLang's batch_is_full: once admission stops for want of KV, the scheduler looks again only
    # after a request leaves the running batch, though the decaying ratio makes room long before.
    engine = Engine(EngineConfig(kv_tokens=1000, max_running_requests=8, context_length=2000))
    a = engine.submit("a", 100, 600, 0.0, prompt_key="a")  # 700 whole
    b = engine.submit("b", 100, 400, 0.0, prompt_key="b")  # 500 whole: not beside a's 700
    now = 0.0
    steps = []
    while a.finish_time is None:
        step = engine.step(now)
        assert step is not None
        steps.append(step)
        now = step.end
    # After ~100 decode steps a's reservation (ratio x what it has left) had shrunk enough for b,
    # which an admission check at every step would have let in then.
    assert [s.kind for s in steps] == ["prefill"] + ["decode"] * 599
    # a left: the scheduler looks again, and b runs.
    assert engine.step(now).kind == "prefill" and engine.running == [b]  # type: ignore[union-attr]


def test_a_finished_request_holds_its_kv_until_the_next_step_which_waits_for_it_rather_than_retract():
    # SGLang's overlap loop schedules a step before it processes the last one's results: c, answered
    # by its own prefill, still holds its 6 slots when the next decode is scheduled, where a and b need
    # 2 and 1 is free. SGLang skips that decode rather than retract; c's slots are back a step later.
    engine = Engine(
        EngineConfig(kv_tokens=16, max_running_requests=8, context_length=1000, new_token_ratio=0.0)
    )
    a = engine.submit("a", 3, 2, 0.0, prompt_key="a")
    assert engine.step(0.0) is not None
    engine.submit("b", 6, 6, 0.0, prompt_key="b")
    assert engine.step(0.0) is not None
    c = engine.submit("c", 6, 1, 0.0, prompt_key="c")
    step = engine.step(0.0)
    assert step is not None and step.kind == "prefill" and step.finished == [c]
    assert engine.leaving == [c] and c.kv_tokens == 6
    assert engine.free_kv_tokens == 1 < len(engine.running) == 2
    step = engine.step(0.0)
    assert step is not None and step.kind == "decode" and step.retracted == []
    assert c.kv_tokens == 0 and engine.leaving == [a]
    run_to_completion(engine)
    assert engine.retracted_total == 0 and engine.used_kv_tokens == 0


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


def test_a_prefill_step_costs_a_fixed_forward_pass_plus_its_tokens():
    # A prefill is one forward pass, like a decode step: its fixed part is charged once per step,
    # however many prompts it takes; a step over KV that arrived by transfer computes nothing.
    cost = CostModel(prefill_base_s=0.004, prefill_per_token_s=20e-6)
    config = EngineConfig(kv_tokens=10_000, max_running_requests=8, context_length=4096, cost=cost)
    engine = Engine(config)
    for i in range(3):
        engine.submit(f"r{i}", 100, 4, 0.0, prompt_key=str(i))
    engine.submit("moved", 100, 4, 0.0, prompt_key="moved", kv_transferred=True)
    step = engine.step(0.0)
    assert step is not None and step.kind == "prefill" and step.prefill_tokens == 300
    assert step.duration == pytest.approx(0.004 + 300 * 20e-6)
    transferred = Engine(config)
    transferred.submit("moved", 100, 4, 0.0, prompt_key="moved", kv_transferred=True)
    only_moved = transferred.step(0.0)
    assert only_moved is not None and only_moved.kind == "prefill" and only_moved.duration == 0.0


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--prefill-base-ms", "-1"),
        ("--decode-base-ms", "nan"),
        ("--prefill-per-token-us", "-0.5"),
        ("--kv-read-gbps", "0"),
    ],
)
def test_kvant_sim_refuses_a_time_it_cannot_run_with_naming_the_flag(flag, value, capsys):
    assert main(["sim", "--model-name", "tiny", "--kv-tokens", "4000", flag, value]) == 2
    assert f"kvant sim: {flag} must be a " in capsys.readouterr().err


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
