"""The admission policies are registered in one place, and a new one is a module plus one line:
here a toy policy, registered for the test only, holds requests back with no other change."""

from __future__ import annotations

import asyncio

import pytest

from kvant_contracts.limits import parse_limits
from kvant_runtime.gate.admission import Admission
from kvant_runtime.gate.admit import policies
from kvant_runtime.gate.admit.check import Check
from tests.unit.gate_harness import run, until


def test_every_registered_policy_is_consulted_under_its_own_name():
    registered = ["concurrency", "token_budget", "engine_queue", "engine_snapshot", "kv_peak", "grant_pace"]
    assert list(policies.POLICIES) == registered
    assert set(registered) >= policies.PACING


def test_a_new_policy_is_one_function_registered_on_one_line(monkeypatch: pytest.MonkeyPatch):
    def at_most_two_sequences(check: Check) -> bool:  # the toy policy's module, in one function
        return check.held.sequences + check.sequences > 2

    monkeypatch.setitem(policies.POLICIES, "toy_sequences", at_most_two_sequences)  # the one line

    async def scenario() -> None:
        admission = Admission(parse_limits({"admission": "worstCase"}))
        first = await admission.acquire(10, sequences=2)
        second = asyncio.create_task(admission.acquire(10, sequences=1))
        await until(lambda: admission.queue_length == 1, "the toy policy to hold the second back")
        admission.release(first)
        admission.release(await second)
        observed = Admission(parse_limits({"mode": "observe", "admission": "worstCase"}))
        assert (await observed.acquire(10, sequences=3)).over_limits == ("toy_sequences",)

    run(scenario())
