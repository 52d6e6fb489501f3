"""Status assembly, in one place: from the conditions a pass wrote and what it found, the status merge
patch and the Events of one reconcile. Summary conditions a pass did not set are settled here."""

from __future__ import annotations

from pydantic import ValidationError

from kvant_contracts.kube_object import Obj
from kvant_operator.api.lifecycle import ConditionType
from kvant_operator.api.status import ConditionStatus, Phase
from kvant_operator.reconcile.state import ConditionLog, Event, Outcome, Pass
from kvant_operator.render.roles import engine_selector


def invalid_spec(body: Obj, log: ConditionLog, err: ValidationError) -> Outcome:
    log.set(ConditionType.DEGRADED, True, "InvalidSpec", validation_message(err))
    log.set(ConditionType.PROGRESSING, False, "InvalidSpec", "fix the spec; see Degraded")
    log.set(ConditionType.READY, False, "InvalidSpec", "the spec is invalid")
    return outcome(body, log, Phase.FAILED, False, None)


def outcome(body: Obj, log: ConditionLog, phase: Phase, busy: bool, p: Pass | None) -> Outcome:
    if ConditionType.DEGRADED not in log.written:
        log.set(ConditionType.DEGRADED, False, "AsExpected", "no failures")
    _kstatus_conditions(log, phase, busy)
    protection = p.protection if p is not None else None
    if protection is not None:
        log.set(ConditionType.CACHE_PROTECTED, *protection.condition)
    status: Obj = {
        "observedGeneration": log.generation,
        "phase": phase.value,
        "conditions": [c.model_dump(mode="json", by_alias=True) for c in log.conditions],
    }
    events: list[Event] = list(p.events) if p is not None else []
    if protection is not None:
        status["protection"] = protection.status  # None values delete stale keys (merge patch)
        events += protection.events
    if p is not None and p.engine is not None:
        status["engine"] = p.engine.model_dump(mode="json", by_alias=True, exclude_none=True)
    if p is not None and p.source is not None:
        status["source"] = p.source.model_dump(mode="json", by_alias=True, exclude_none=True)
    if p is not None and p.plan is not None:
        status["plan"] = p.plan.model_dump(mode="json", by_alias=True, exclude_none=True)
    if p is not None and p.artifact is not None:
        status["artifact"] = p.artifact.model_dump(mode="json", by_alias=True, exclude_none=True)
    if p is not None and p.replicas is not None:
        status["replicas"], status["readyReplicas"] = p.replicas
        status["selector"] = engine_selector(body["metadata"]["name"])  # the scale subresource's
    if p is not None and p.autoscaling is not None:
        status["autoscaling"] = p.autoscaling.model_dump(mode="json", by_alias=True, exclude_none=True)
    elif (body.get("status") or {}).get("autoscaling") and not (body.get("spec") or {}).get("autoscaling"):
        status["autoscaling"] = None  # autoscaling turned off: the merge patch deletes the block
    if phase.value != (body.get("status") or {}).get("phase"):
        kind = "Warning" if phase in (Phase.FAILED, Phase.DEGRADED) else "Normal"
        events.append((kind, f"Phase{phase.value}", _phase_message(log, phase)))
    return Outcome(status, events, busy)


def _kstatus_conditions(log: ConditionLog, phase: Phase, busy: bool) -> None:
    """kstatus' pair, from what the pass found: Stalled while the current generation has failed (it
    waits for a fix, or for its retry), else Reconciling while work on it is under way."""
    degraded = log.previous(ConditionType.DEGRADED)
    if degraded is not None and degraded.status is ConditionStatus.TRUE:
        log.set(ConditionType.STALLED, True, degraded.reason, degraded.message)
        log.set(ConditionType.RECONCILING, False, "Stalled", "the current generation failed; see Stalled")
        return
    log.set(ConditionType.STALLED, False, "AsExpected", "no failures")
    if busy:
        progressing = log.previous(ConditionType.PROGRESSING)
        message = progressing.message if progressing is not None else f"phase {phase.value}"
        log.set(ConditionType.RECONCILING, True, phase.value, message)
    else:
        log.set(ConditionType.RECONCILING, False, "Settled", "the current generation is done")


def validation_message(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(x) for x in e["loc"])
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


def _phase_message(log: ConditionLog, phase: Phase) -> str:
    degraded = log.previous(ConditionType.DEGRADED)
    if degraded is not None and degraded.status is ConditionStatus.TRUE:
        return degraded.message[:500]
    return f"phase is now {phase.value}"
