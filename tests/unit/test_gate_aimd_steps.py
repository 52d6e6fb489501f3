"""The local fast loop's AIMD: cut multiplicatively when the engine retracts, grow additively when
clean, and slowly near the level that last retracted; a full cache alone is no reason to cut."""

from __future__ import annotations

from kvant_contracts.limits import parse_limits
from kvant_runtime.gate.concurrency import ConcurrencyController, EngineSample

LIMITS = {"maxConcurrency": 64, "targetTokenUsage": 0.9, "concurrency": {"min": 4, "max": 128}}


def _sample(token_usage: float = 0.5, retracted: float = 0) -> EngineSample:
    return EngineSample(token_usage=token_usage, retracted_total=retracted, max_total_num_tokens=1000)


def test_starts_at_the_ceiling_min_of_max_concurrency_and_concurrency_max():
    assert ConcurrencyController(parse_limits(LIMITS)).value == 64


def test_a_full_cache_without_retractions_does_not_cut():
    controller = ConcurrencyController(parse_limits(LIMITS))
    controller.value = 40
    for tick in range(5):
        controller.step(_sample(0.99), now=float(tick), in_flight=40)
    assert controller.value == 45


def test_a_retraction_cuts_from_what_was_in_flight_with_a_readable_reason():
    controller = ConcurrencyController(parse_limits(LIMITS))
    controller.step(_sample(retracted=0), now=0.0, in_flight=40)
    change = controller.step(_sample(retracted=2), now=1.0, in_flight=40)
    assert change is not None
    assert (change.old, change.new, change.direction, change.signal) == (64, 30, "down", "retractions")
    assert change.reason == "2 retractions/min > maxRetractionsPerMinute 0; concurrency 64 → 30"


def test_no_second_cut_until_in_flight_has_drained_to_the_new_limit():
    controller = ConcurrencyController(parse_limits(LIMITS))
    controller.step(_sample(retracted=0), now=0.0, in_flight=64)
    controller.step(_sample(retracted=1), now=1.0, in_flight=64)
    assert controller.value == 48
    assert controller.step(_sample(retracted=2), now=2.0, in_flight=60) is None
    assert controller.value == 48
    change = controller.step(_sample(retracted=3), now=3.0, in_flight=48)
    assert change is not None and change.new == 36


def test_clean_ticks_grow_fast_then_slowly_near_the_level_that_retracted_which_is_forgotten_later():
    controller = ConcurrencyController(parse_limits(LIMITS))
    controller.step(_sample(retracted=0), now=0.0, in_flight=40)
    controller.step(_sample(retracted=1), now=1.0, in_flight=40)
    assert controller.value == 30
    values = []
    for tick in range(2, 40):
        controller.step(_sample(retracted=1), now=float(tick), in_flight=0)
        values.append(controller.value)
    # Up to 90% of 40 a step a second; past it one step per 30 s since the retraction.
    assert values[:6] == [31, 32, 33, 34, 35, 36]
    assert max(values) == 37 and values.index(37) == 31 - 2
    controller.step(_sample(retracted=1), now=400.0, in_flight=0)  # 300 s clean: forgotten
    assert controller.value == 38
    controller.step(_sample(retracted=1), now=401.0, in_flight=0)
    assert controller.value == 39


def test_healthy_ticks_grow_by_the_increase_step_up_to_the_ceiling():
    controller = ConcurrencyController(
        parse_limits({**LIMITS, "concurrency": {"min": 4, "max": 128, "increaseStep": 5}})
    )
    controller.value = 48
    values = []
    for tick in range(1, 6):
        controller.step(_sample(0.5), now=float(tick), in_flight=0)
        values.append(controller.value)
    assert values == [53, 58, 63, 64, 64]


def test_cuts_never_go_below_concurrency_min():
    controller = ConcurrencyController(parse_limits(LIMITS))
    for tick in range(50):
        controller.step(_sample(retracted=tick), now=float(tick), in_flight=0)
    assert controller.value == 4


def test_new_retractions_cut_and_an_engine_restart_resetting_the_counter_does_not():
    controller = ConcurrencyController(parse_limits(LIMITS))
    assert controller.step(_sample(retracted=7), now=0.0, in_flight=0) is None  # baseline, at ceiling
    change = controller.step(_sample(retracted=9), now=1.0, in_flight=0)
    assert change is not None and change.signal == "retractions" and change.new == 48
    assert "2 retractions/min > maxRetractionsPerMinute 0" in change.reason
    restarted = controller.step(_sample(retracted=0), now=2.0, in_flight=0)
    assert restarted is not None and restarted.direction == "up"


def test_retractions_within_the_allowance_per_minute_are_tolerated():
    controller = ConcurrencyController(parse_limits({**LIMITS, "maxRetractionsPerMinute": 3}))
    controller.value = 32
    totals = [0, 1, 2, 3, 4]  # one more each second: the 4th in the minute exceeds 3
    signals = []
    for tick, total in enumerate(totals):
        change = controller.step(_sample(retracted=total), now=float(tick), in_flight=0)
        signals.append(change.signal if change else None)
    assert signals == ["healthy", None, None, None, "retractions"]
    # More than a minute later the old retractions have left the window: one more is tolerated,
    # and a tick without new ones is healthy again.
    assert controller.step(_sample(retracted=5), now=70.0, in_flight=0) is None
    change = controller.step(_sample(retracted=5), now=71.0, in_flight=0)
    assert change is not None and change.signal == "healthy"


def test_new_limits_clamp_the_value_at_once():
    controller = ConcurrencyController(parse_limits(LIMITS))
    change = controller.set_limits(parse_limits({**LIMITS, "maxConcurrency": 16}))
    assert change is not None and (change.old, change.new, change.direction) == (64, 16, "down")
    controller.value = 4
    change = controller.set_limits(parse_limits({**LIMITS, "concurrency": {"min": 8, "max": 128}}))
    assert change is not None and change.new == 8
    assert controller.set_limits(parse_limits({**LIMITS, "concurrency": {"min": 8, "max": 128}})) is None


def test_mode_off_cuts_nothing_and_remembers_nothing_for_a_later_enforce():
    """An unprotected engine's retractions say nothing of the level a protected one retracts at."""
    controller = ConcurrencyController(parse_limits({**LIMITS, "mode": "off"}))
    controller.step(_sample(retracted=0), now=0.0, in_flight=40)
    assert controller.step(_sample(retracted=5), now=1.0, in_flight=40) is None
    assert controller.step(None, now=2.0, in_flight=40) is None  # stale metrics: nothing to protect
    assert controller.value == 64
    controller.set_limits(parse_limits(LIMITS))  # on-call switches to enforce
    for tick in range(3, 6):  # no new retraction: nothing to cut, and no remembered level to probe
        controller.step(_sample(retracted=5), now=float(tick), in_flight=40)
    assert controller.value == 64
    change = controller.step(_sample(retracted=6), now=6.0, in_flight=40)  # a protected retraction
    assert change is not None and change.new == 30
