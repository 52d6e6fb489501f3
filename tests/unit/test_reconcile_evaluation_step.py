"""The accuracy gate on an in-memory cluster: it waits, passes, blocks, and settles per candidate."""

from __future__ import annotations

import json

import pytest

from kvant_contracts.kube_object import Obj
from kvant_operator.api.status import Phase
from kvant_operator.artifact_recipe import artifact_key
from kvant_operator.reconcile.evaluation_step import gate_on_evaluation
from kvant_operator.reconcile.state import Blocked
from kvant_operator.render.jobs import eval_job_name
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import NAMESPACE, SETTINGS, body, condition, new_pass


def _gated(block: bool = True) -> Obj:
    return body(evaluation={"maxKLDivergence": 0.05, "blockRollout": block})


def _verdict(kl: float, passed: bool) -> str:
    return json.dumps({"meanKLDivergence": kl, "top1Agreement": 0.97, "passed": passed})


def test_no_evaluation_requested_validates_at_once() -> None:
    kube, p = MemoryKube(), new_pass(body())
    gate_on_evaluation(p, kube, SETTINGS)
    assert condition(p, "Validated").reason == "NotRequested" and kube.created == []


def test_a_blocking_gate_holds_the_rollout_until_the_job_passes() -> None:
    model, kube = _gated(), MemoryKube()
    p = new_pass(model)
    name = eval_job_name(artifact_key(p.spec), p.spec)
    with pytest.raises(Blocked) as blocked:
        gate_on_evaluation(p, kube, SETTINGS)
    assert blocked.value.phase is Phase.EVALUATING and kube.jobs(NAMESPACE) == [name]

    kube.finish_job(NAMESPACE, name, {"eval": _verdict(0.01, True)})
    p = new_pass(model)
    gate_on_evaluation(p, kube, SETTINGS)
    validated = condition(p, "Validated")
    assert validated.reason == "Passed" and "meanKLDivergence 0.01" in validated.message


def test_a_non_blocking_gate_lets_the_rollout_go_on_while_it_runs() -> None:
    kube, p = MemoryKube(), new_pass(_gated(block=False))
    gate_on_evaluation(p, kube, SETTINGS)
    assert condition(p, "Validated").reason == "Evaluating"


def test_a_failed_candidate_is_not_rolled_out_and_the_verdict_is_kept() -> None:
    model, kube = _gated(), MemoryKube()
    p = new_pass(model)
    name = eval_job_name(artifact_key(p.spec), p.spec)
    with pytest.raises(Blocked):
        gate_on_evaluation(p, kube, SETTINGS)
    kube.finish_job(NAMESPACE, name, {"eval": _verdict(0.4, False)}, failed="eval")
    with pytest.raises(Blocked) as blocked:
        gate_on_evaluation(p, kube, SETTINGS)
    assert blocked.value.phase is Phase.DEGRADED and not blocked.value.busy
    assert condition(p, "Validated").reason == "GateFailed"
    assert condition(p, "Degraded").reason == "EvaluationFailed"

    # The next pass keeps the verdict from the condition: no second Job, no second event.
    settled = {
        **model,
        "status": {"conditions": [c.model_dump(mode="json", by_alias=True) for c in p.log.conditions]},
    }
    quiet, again = MemoryKube(), new_pass(settled)
    with pytest.raises(Blocked):
        gate_on_evaluation(again, quiet, SETTINGS)
    assert quiet.created == [] and again.events == []
