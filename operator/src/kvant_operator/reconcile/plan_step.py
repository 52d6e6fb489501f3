"""The plan step: a Job reads the checkpoint's config and tensor inventory and prints the capacity
plan; the plan is kept in status.plan with a digest of its inputs, so it reruns only when they change."""

from __future__ import annotations

import json

from kvant_contracts.kube_object import Obj
from kvant_contracts.kv_scale_delivery import Unloadable, delivery
from kvant_operator.api.lifecycle import ConditionType
from kvant_operator.api.status import Phase, PlanStatus
from kvant_operator.artifact_recipe import needs_calibration
from kvant_operator.hashing import digest
from kvant_operator.jobstate import JobPhase, ensure_job, failure_detail, job_state, last_pod_log
from kvant_operator.kube_door import KubeDoor
from kvant_operator.planner.calibration_sizing import with_calibration
from kvant_operator.planner.capacity_plan import CapacityPlan
from kvant_operator.planner.gptq_sizing import with_gptq
from kvant_operator.reconcile.state import Blocked, Pass
from kvant_operator.render import jobs
from kvant_operator.settings import OperatorSettings


def ensure_plan(p: Pass, kube: KubeDoor, settings: OperatorSettings) -> None:
    inputs = digest(jobs.plan_inputs(p.spec))
    if p.plan is None or p.plan.inputs != inputs:
        p.plan = _run_plan(p, kube, settings, inputs)
        p.events.append(("Normal", "Planned", plan_summary(p.plan)))
    p.plan = with_gptq(with_calibration(p.plan, p.spec), p.spec)
    if p.plan.refusal is not None:
        raise p.fail(
            "PlanDoesNotFit",
            f"the capacity plan starts no engine: {p.plan.refusal}",
            "edit the spec as the message says (status.plan has the numbers); see Degraded",
        )
    if needs_calibration(p.spec) and p.plan.architecture:
        try:
            delivery(p.plan.architecture, p.spec.kv_cache.dtype.value)
        except Unloadable as refused:
            raise p.fail(
                "KVScalesNotLoadable",
                f"spec.kvCache.scales: calibrate: {refused}",
                "choose kvCache.scales: unit knowingly (spec.evaluation measures its accuracy) or a bf16 KV "
                "cache; see Degraded",
            ) from None


def _run_plan(p: Pass, kube: KubeDoor, settings: OperatorSettings, inputs: str) -> PlanStatus:
    job = ensure_job(kube, jobs.plan_job(p.body, p.spec, settings, p.source))
    state = job_state(job)
    if state.phase is JobPhase.RUNNING:
        p.condition(
            ConditionType.PROGRESSING,
            True,
            "Planning",
            "reading the checkpoint's config and tensor inventory to plan KV capacity",
        )
        raise Blocked(Phase.PENDING)
    if state.phase is JobPhase.FAILED:
        detail = failure_detail(kube, job) or state.detail
        raise p.fail(
            "PlanFailed", f"capacity planning failed: {detail}", "fix the source or spec; see Degraded"
        )
    return _read_plan(kube, job, inputs)


def _read_plan(kube: KubeDoor, job: Obj, inputs: str) -> PlanStatus:
    text = last_pod_log(kube, job, "plan")
    plan = CapacityPlan.model_validate(json.loads(text)).to_status()
    return plan.model_copy(update={"inputs": inputs})


def plan_summary(plan: PlanStatus) -> str:
    concurrency = ", ".join(f"{k} tokens: {v}" for k, v in plan.max_concurrency.items())
    return (
        f"KV {plan.kv_cache_dtype}: {plan.kv_bytes_per_token_per_gpu} B/token/GPU, "
        f"{plan.kv_tokens_per_replica} tokens per replica; concurrency at {concurrency}"
    )
