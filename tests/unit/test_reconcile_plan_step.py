"""The plan step on an in-memory cluster: one Job per plan input, its result kept, its failure explained."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvant_operator.api.status import Phase
from kvant_operator.reconcile.plan_step import ensure_plan
from kvant_operator.reconcile.state import Blocked
from kvant_operator.render.jobs import plan_job_name
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import NAMESPACE, SETTINGS, body, condition, new_pass, plan_log


def test_a_new_model_starts_one_plan_job_and_waits() -> None:
    kube, p = MemoryKube(), new_pass(body())
    for _ in range(2):  # the second pass finds the Job it created, not a new one
        with pytest.raises(Blocked) as blocked:
            ensure_plan(p, kube, SETTINGS)
        assert blocked.value.phase is Phase.PENDING and blocked.value.busy
    assert kube.jobs(NAMESPACE) == [plan_job_name("tiny", p.spec)]
    assert condition(p, "Progressing").reason == "Planning"


def test_the_finished_plan_is_kept_with_its_inputs(tmp_path: Path) -> None:
    model, kube = body(), MemoryKube()
    p = new_pass(model)
    with pytest.raises(Blocked):
        ensure_plan(p, kube, SETTINGS)
    kube.finish_job(NAMESPACE, plan_job_name("tiny", p.spec), {"plan": plan_log(model, tmp_path)})
    ensure_plan(p, kube, SETTINGS)
    assert p.plan is not None and p.plan.inputs
    assert p.plan.kv_tokens_per_replica > 0
    assert [e[1] for e in p.events] == ["Planned"]

    # The next pass sees status.plan with the same inputs and reads nothing.
    again = new_pass(model)
    again.plan = p.plan
    quiet = MemoryKube()
    ensure_plan(again, quiet, SETTINGS)
    assert quiet.jobs(NAMESPACE) == [] and again.events == []


def test_a_changed_input_plans_again() -> None:
    kube, p = MemoryKube(), new_pass(body(), planned=True)  # the fixture plan has other inputs
    with pytest.raises(Blocked):
        ensure_plan(p, kube, SETTINGS)
    assert kube.jobs(NAMESPACE) == [plan_job_name("tiny", p.spec)]


def test_a_failed_plan_degrades_with_the_container_log() -> None:
    kube, p = MemoryKube(), new_pass(body())
    with pytest.raises(Blocked):
        ensure_plan(p, kube, SETTINGS)
    name = plan_job_name("tiny", p.spec)
    kube.finish_job(NAMESPACE, name, {"plan": "kvant plan: config.json: no num_hidden_layers"}, failed="plan")
    with pytest.raises(Blocked) as blocked:
        ensure_plan(p, kube, SETTINGS)
    assert blocked.value.phase is Phase.FAILED and not blocked.value.busy
    degraded = condition(p, "Degraded")
    assert degraded.reason == "PlanFailed"
    assert "container plan exited 1" in degraded.message and "no num_hidden_layers" in degraded.message
    assert condition(p, "Progressing").status == "False"


def test_a_plan_that_starts_no_engine_degrades_naming_why(tmp_path: Path) -> None:
    """Weights that leave no KV cache: SGLang would refuse a KV cache of 0 tokens, and the launch spec
    refused it with a traceback in the operator before; now the model is Degraded and waits."""
    model = body(serving={"engine": "simulator", "gpu": {"memoryGiB": 0.001}, "memFractionStatic": 0.9})
    kube, p = MemoryKube(), new_pass(model)
    with pytest.raises(Blocked):
        ensure_plan(p, kube, SETTINGS)
    kube.finish_job(NAMESPACE, plan_job_name("tiny", p.spec), {"plan": plan_log(model, tmp_path)})
    with pytest.raises(Blocked) as blocked:
        ensure_plan(p, kube, SETTINGS)
    assert blocked.value.phase is Phase.FAILED and not blocked.value.busy
    assert p.plan is not None and p.plan.kv_tokens_per_replica == 0 and p.plan.refusal
    degraded = condition(p, "Degraded")
    assert degraded.reason == "PlanDoesNotFit"
    assert "no KV cache fits beside the weights" in degraded.message and "weights need" in degraded.message
