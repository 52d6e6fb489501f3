"""One reconcile of one QuantizedModel: fetch → plan → artifact → evaluation → serving, then the status.

The steps are idempotent and keep their state in the cluster (Jobs with deterministic names, the
artifact records, status.plan), so an operator restart resumes exactly where the last one stopped.
Each step lives in its own module and is tested on its own against an in-memory `KubeDoor`.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import ValidationError

from kvant_contracts.kube_object import Obj
from kvant_operator.api.lifecycle import ConditionType
from kvant_operator.api.resource import QuantizedModel
from kvant_operator.api.status import ArtifactStatus, Condition, EngineStatus, PlanStatus, SourceStatus
from kvant_operator.kube_door import KubeDoor
from kvant_operator.protection.loop import ProtectionResult
from kvant_operator.reconcile.artifact_step import ensure_artifact
from kvant_operator.reconcile.evaluation_step import gate_on_evaluation
from kvant_operator.reconcile.fetch_step import ensure_source
from kvant_operator.reconcile.newer_fields import newer_fields_event, without_newer_fields
from kvant_operator.reconcile.plan_step import ensure_plan
from kvant_operator.reconcile.serving_step import ready_while_blocked, serve, spec_changed
from kvant_operator.reconcile.state import Blocked, ConditionLog, Outcome, Pass
from kvant_operator.reconcile.status_patch import invalid_spec, outcome
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import file_source_refusal


class Reconciler:
    def __init__(self, kube: KubeDoor, settings: OperatorSettings) -> None:
        self.kube, self.settings = kube, settings

    def reconcile(
        self,
        body: Obj,
        protection: ProtectionResult | None = None,
        resync: bool = True,
        now: datetime | None = None,
        pod_work: dict[str, float] | None = None,
    ) -> Outcome:
        """`protection` is this pass's protection step, when one ran; it joins the same status write.
        `resync` False skips re-applying serving objects: the caller knows nothing changed since.
        `pod_work` is each serving pod's KV usage in the last protection step (a scale-in's order)."""
        status = body.get("status") or {}
        log = ConditionLog(
            [Condition.model_validate(c) for c in status.get("conditions") or []],
            int(body["metadata"].get("generation", 0)),
            now or datetime.now(UTC).replace(microsecond=0),
        )
        newer: list[str] = []
        try:
            spec = QuantizedModel.model_validate(body).spec
        except ValidationError as err:
            known = without_newer_fields(body, err)
            if known is None:
                return invalid_spec(body, log, err)
            spec, newer = QuantizedModel.model_validate(known[0]).spec, known[1]
        p = Pass(
            body,
            spec,
            log,
            source=SourceStatus.model_validate(status["source"]) if status.get("source") else None,
            engine=EngineStatus.model_validate(status["engine"]) if status.get("engine") else None,
            plan=PlanStatus.model_validate(status["plan"]) if status.get("plan") else None,
            artifact=ArtifactStatus.model_validate(status["artifact"]) if status.get("artifact") else None,
            protection=protection,
            resync=resync,
            pod_work=dict(pod_work or {}),
        )
        if newer and spec_changed(body):  # once per generation
            p.events.append(newer_fields_event(newer))
        try:
            refusal = file_source_refusal(spec.source.uri, self.settings.file_source_prefixes)
            if refusal is not None:
                raise p.fail("SourceNotAllowed", refusal, "fix spec.source.uri; see Degraded")
            ensure_source(p, self.kube, self.settings)
            ensure_plan(p, self.kube, self.settings)
            ensure_artifact(p, self.kube, self.settings)
            gate_on_evaluation(p, self.kube, self.settings)
            phase, busy = serve(p, self.kube, self.settings)
        except Blocked as blocked:
            phase, busy = blocked.phase, blocked.busy
        if ConditionType.READY not in p.log.written:
            ready_while_blocked(p, self.kube, phase)
        return outcome(body, p.log, phase, busy, p)
