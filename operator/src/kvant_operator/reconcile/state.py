"""The state one reconcile pass builds: the conditions it rewrites, what it learned, what it reports.

Steps receive a `Pass`, set conditions on it and fill in what they found (plan, artifact, replicas).
A step that cannot finish yet raises `Blocked` with the phase that says so; the reconciler then
assembles the status in one place (`reconcile.status`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from kvant_contracts.kube_object import Obj
from kvant_operator.api.lifecycle import ConditionType, set_condition
from kvant_operator.api.spec import QuantizedModelSpec
from kvant_operator.api.status import (
    ArtifactStatus,
    AutoscalingStatus,
    Condition,
    ConditionStatus,
    EngineStatus,
    Phase,
    PlanStatus,
    SourceStatus,
)
from kvant_operator.protection.loop import ProtectionResult

Event = tuple[str, str, str]  # (type, reason, message)


class Blocked(Exception):
    """A step cannot finish yet; the conditions on the pass say why, and `phase` is the model's phase."""

    def __init__(self, phase: Phase, busy: bool = True) -> None:
        super().__init__(phase.value)
        self.phase, self.busy = phase, busy


@dataclass
class Outcome:
    """What one reconcile wants written: the status (one merge patch) and the Events to record."""

    status: Obj
    events: list[Event] = field(default_factory=list)
    busy: bool = False  # True while something is in progress: reconcile again soon


@dataclass
class ConditionLog:
    """The conditions as one pass rewrites them, remembering which ones it set."""

    conditions: list[Condition]
    generation: int
    now: datetime
    written: set[ConditionType] = field(default_factory=set)

    def set(self, kind: ConditionType, ok: bool | ConditionStatus, reason: str, message: str) -> None:
        if isinstance(ok, ConditionStatus):
            status = ok
        else:
            status = ConditionStatus.TRUE if ok else ConditionStatus.FALSE
        self.conditions = set_condition(
            self.conditions,
            kind,
            status,
            reason=reason,
            message=message,
            generation=self.generation,
            now=self.now,
        )
        self.written.add(kind)

    def previous(self, kind: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)


@dataclass
class Pass:
    """The state of one reconcile pass as it builds the new status."""

    body: Obj
    spec: QuantizedModelSpec
    log: ConditionLog
    source: SourceStatus | None = None  # a fetched source, once fetched
    engine: EngineStatus | None = None  # the serving image's SGLang, once an engine pod checked it
    plan: PlanStatus | None = None
    artifact: ArtifactStatus | None = None
    protection: ProtectionResult | None = None
    pod_work: dict[str, float] = field(default_factory=dict)  # each serving pod's last KV usage
    resync: bool = True  # apply every serving object; False: only read the rollout (settled, unchanged)
    replicas: tuple[int, int] | None = None  # (existing, ready) serving replicas
    autoscaling: AutoscalingStatus | None = None  # the HPA's view, with spec.autoscaling set
    events: list[Event] = field(default_factory=list)

    @property
    def now(self) -> datetime:
        return self.log.now

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def model(self) -> str:
        return str(self.body["metadata"]["name"])

    def condition(self, kind: ConditionType, ok: bool, reason: str, message: str) -> None:
        self.log.set(kind, ok, reason, message)

    def fail(self, reason: str, message: str, fix: str, phase: Phase = Phase.FAILED) -> Blocked:
        """Degraded with `message` and no longer progressing (`fix` says what would move it on): what
        every failure that waits for a person says. Raise the result."""
        self.condition(ConditionType.DEGRADED, True, reason, message)
        self.condition(ConditionType.PROGRESSING, False, reason, fix)
        return Blocked(phase, busy=False)
