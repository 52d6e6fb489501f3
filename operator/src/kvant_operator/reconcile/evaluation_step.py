"""The evaluation step, the accuracy gate: with blockRollout, a failing or unfinished candidate never
gets serving pods. The verdict is kept in the Validated condition, naming the Job that gave it, so a
settled candidate is not evaluated again."""

from __future__ import annotations

from kvant_contracts.job_lines import EvalVerdict
from kvant_contracts.kube_object import Obj
from kvant_operator.api.lifecycle import ConditionType
from kvant_operator.api.status import Phase
from kvant_operator.artifact_recipe import artifact_key, needs_artifact
from kvant_operator.jobstate import JobPhase, ensure_job, failure_detail, job_state, last_pod_log
from kvant_operator.kube_door import KubeDoor
from kvant_operator.reconcile.state import Blocked, Pass
from kvant_operator.render import jobs
from kvant_operator.settings import OperatorSettings

PASSED, GATE_FAILED = "Passed", "GateFailed"


def gate_on_evaluation(p: Pass, kube: KubeDoor, settings: OperatorSettings) -> None:
    evaluation = p.spec.evaluation
    if evaluation is None or not needs_artifact(p.spec):
        reason = "NotRequested" if evaluation is None else "NothingConverted"
        p.condition(ConditionType.VALIDATED, True, reason, "no evaluation gate applies")
        return
    key = artifact_key(p.spec, p.source)
    name = jobs.eval_job_name(key, p.spec)
    previous = p.log.previous(ConditionType.VALIDATED)
    if previous is not None and previous.reason in (PASSED, GATE_FAILED) and name in previous.message:
        p.log.written.add(ConditionType.VALIDATED)  # settled for this candidate: keep it
        _gate(p, evaluation.block_rollout, previous.reason == PASSED, previous.message)
        return
    job = ensure_job(kube, jobs.eval_job(p.body, p.spec, settings, key, p.source))
    if job_state(job).phase is JobPhase.RUNNING:
        p.condition(
            ConditionType.VALIDATED, False, "Evaluating", f"job {name} compares the artifact with its source"
        )
        p.condition(ConditionType.PROGRESSING, True, "Evaluating", f"job {name} is running")
        if evaluation.block_rollout:
            raise Blocked(Phase.EVALUATING)
        return
    passed, message = _verdict(kube, job, name, evaluation.max_kl_divergence)
    p.condition(ConditionType.VALIDATED, passed, PASSED if passed else GATE_FAILED, message)
    p.events.append(
        ("Normal" if passed else "Warning", "EvaluationPassed" if passed else "EvaluationFailed", message)
    )
    _gate(p, evaluation.block_rollout, passed, message)


def _gate(p: Pass, block: bool, passed: bool, message: str) -> None:
    if not passed and block:
        raise p.fail(
            "EvaluationFailed",
            f"the candidate failed the accuracy gate and is not rolled out (blockRollout): {message}",
            "fix the recipe or the threshold",
            Phase.DEGRADED,
        )


def _verdict(kube: KubeDoor, job: Obj, name: str, threshold: float) -> tuple[bool, str]:
    verdict = EvalVerdict.from_log(last_pod_log(kube, job, "eval", 50))
    if verdict is None:
        return False, f"job {name} gave no result: {failure_detail(kube, job)}"
    measured = (
        f"meanKLDivergence {verdict.meanKLDivergence:.4g} (maxKLDivergence {threshold:g}), "
        f"top-1 agreement {verdict.top1Agreement:.3f}"
    )
    if verdict.passed:
        return True, f"job {name}: {measured}"
    return False, f"job {name}: {verdict.failure or measured}"
