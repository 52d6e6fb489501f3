"""What `kvant status` shows for one model, built from its CR, its replicas' metrics and (when there
is a Prometheus) a short history; status_text prints it. Pure: no I/O here."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from kvant_contracts import prometheus_text
from kvant_contracts.kube_object import Obj
from kvant_contracts.limits import Limits
from kvant_contracts.serving_pod import GATE_BUSY_REASONS
from kvant_contracts.sglang_metrics import (
    NUM_QUEUE_REQS,
    NUM_RETRACTED_REQUESTS_TOTAL,
    NUM_RUNNING_REQS,
    PREFIX,
    TOKEN_USAGE,
    Series,
    combine,
    retractions_total,
    scheduler_of,
)
from kvant_contracts.tenancy import PRIORITIES, as_priority, rank

# The gate's per-tenant series (kvant_runtime.gate.gate_metrics.TenantSeries), as exposed: counters
# carry `_total`. Each gate labels its own top tenants and counts the rest as "other".
TENANT_ADMITTED_TOKENS = "kvant_gate_tenant_admitted_tokens_total"
TENANT_REJECTED = "kvant_gate_tenant_rejected_total"
TENANT_QUEUED = "kvant_gate_tenant_queued"
# Rows of the tenants table: as many as one gate names tenants (TOP_TENANTS), so the screen stays short.
TENANT_ROWS = 10
# The run of status.plan that the phase is waiting on (api.status.PlanStatus's CalibratedRun fields):
# GPTQ is the conversion's long part, calibration the calibration Job's whole.
PLANNED_RUNS = {"Converting": ("gptq", "GPTQ"), "Calibrating": ("calibration", "calibration")}


@dataclass
class TenantLoad:
    """One tenant in one priority class, on one replica or summed over a model's replicas."""

    tenant: str
    priority: str
    admitted_tokens: float = 0.0  # since the gate started
    queued: float = 0.0  # waiting at the gate now
    refused: dict[str, float] = field(default_factory=dict)  # by reason, since the gate started

    @property
    def refused_total(self) -> float:
        return sum(self.refused.values())

    @property
    def idle(self) -> bool:
        """Nothing admitted, queued or refused: one of the gate's series at 0 from its start."""
        return not (self.admitted_tokens or self.queued or self.refused_total)


@dataclass
class Replica:
    pod: str
    token_usage: float | None = None
    running: float | None = None
    queued_engine: float | None = None
    retracted: float | None = None  # in the last 5 minutes with Prometheus, else since the engine started
    turned_away: float | None = None  # the gate's 429/503s since it started
    queued_gate: float | None = None
    concurrency: float | None = None
    error: str | None = None  # why the metrics could not be read
    # Per (tenant, class); empty from gates without tenant series. Shown summed over the replicas
    # (ModelStatus.tenants), not per replica.
    tenants: list[TenantLoad] = field(default_factory=list)


@dataclass
class ModelStatus:
    namespace: str
    name: str
    phase: str
    generation: int
    observed_generation: int | None
    conditions: list[Obj]
    limits: Obj
    protection: Obj
    # status.autoscaling as the operator wrote it from the model's HPA; None without spec.autoscaling.
    autoscaling: Obj | None = None
    # The plan's estimate for the run the phase waits on (PLANNED_RUNS).
    planned_run: Obj | None = None
    replicas: list[Replica] = field(default_factory=list)
    usage_history: list[float] = field(default_factory=list)  # worst replica, last 15 minutes
    retractions_window: str = "since the engine started"

    @property
    def tenants(self) -> list[TenantLoad]:
        """The busiest tenants over all replicas: the most refused first, then the most admitted."""
        return top_tenants(self.replicas)

    def to_json(self) -> Obj:
        data = asdict(self)
        for replica in data["replicas"]:
            del replica["tenants"]  # the model's sum below says it once
        data["tenants"] = [{**asdict(t), "refused_total": t.refused_total} for t in self.tenants]
        return data


def model_status(qm: Obj) -> ModelStatus:
    status = qm.get("status") or {}
    spec = qm.get("spec") or {}
    protection = spec.get("protection") or {}
    limits = {
        **(spec.get("limits") or {}),
        "targetTokenUsage": protection.get("targetTokenUsage", Limits().targetTokenUsage),
        "protectionMode": protection.get("mode", Limits().mode),
        "concurrencyBounds": protection.get("concurrency") or {},
    }
    phase = str(status.get("phase", "Unknown"))
    field_name, _ = PLANNED_RUNS.get(phase, ("", ""))
    run = (status.get("plan") or {}).get(field_name) if field_name else None
    return ModelStatus(
        namespace=qm["metadata"]["namespace"],
        name=qm["metadata"]["name"],
        phase=phase,
        generation=int(qm["metadata"].get("generation", 0)),
        observed_generation=status.get("observedGeneration"),
        conditions=list(status.get("conditions") or []),
        limits=limits,
        protection=dict(status.get("protection") or {}),
        autoscaling=dict(status["autoscaling"]) if status.get("autoscaling") else None,
        planned_run=dict(run) if run else None,
    )


def replica_from_metrics(pod: str, text: str) -> Replica:
    """A replica's numbers from its pod's merged /metrics (the gate's series, then the engine's)."""
    sums: dict[str, float] = {}
    maxima: dict[str, float] = {}
    engine: dict[str, list[Series]] = {}
    tenants: dict[tuple[str, str], TenantLoad] = {}
    for sample in prometheus_text.samples(text):
        if sample.name in (TENANT_ADMITTED_TOKENS, TENANT_REJECTED, TENANT_QUEUED):
            _add_tenant_sample(tenants, sample.name, sample.labels, sample.value)
            continue
        if sample.name.startswith(PREFIX):
            engine.setdefault(sample.name, []).append((scheduler_of(sample.labels), sample.value))
            continue
        if (
            sample.name == "kvant_gate_rejected_total"
            and sample.labels.get("reason") not in GATE_BUSY_REASONS
        ):
            continue
        sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
        maxima[sample.name] = max(maxima.get(sample.name, 0.0), sample.value)
    token_usage = combine(TOKEN_USAGE, engine.get(TOKEN_USAGE, []))
    return Replica(
        pod=pod,
        token_usage=token_usage,
        running=combine(NUM_RUNNING_REQS, engine.get(NUM_RUNNING_REQS, [])),
        queued_engine=combine(NUM_QUEUE_REQS, engine.get(NUM_QUEUE_REQS, [])),
        # No counter yet while the engine answers: nothing retracted so far.
        retracted=(
            retractions_total(engine.get(NUM_RETRACTED_REQUESTS_TOTAL, []))
            if token_usage is not None
            else None
        ),
        turned_away=sums.get("kvant_gate_rejected_total"),
        queued_gate=sums.get("kvant_gate_queue_length"),
        concurrency=maxima.get("kvant_gate_effective_concurrency"),
        tenants=list(tenants.values()),
    )


def _add_tenant_sample(
    tenants: dict[tuple[str, str], TenantLoad], name: str, labels: dict[str, str], value: float
) -> None:
    key = (labels.get("tenant", ""), labels.get("priority", ""))
    load = tenants.setdefault(key, TenantLoad(*key))
    if name == TENANT_ADMITTED_TOKENS:
        load.admitted_tokens += value
    elif name == TENANT_QUEUED:
        load.queued += value
    else:
        reason = labels.get("reason", "")
        load.refused[reason] = load.refused.get(reason, 0.0) + value


def top_tenants(replicas: list[Replica], rows: int = TENANT_ROWS) -> list[TenantLoad]:
    """Each (tenant, class) summed over the replicas, idle ones left out: the most refused first, then
    the most admitted tokens, at most `rows`. A tenant outside one gate's top counts as "other" there,
    so its numbers may be split between its own row and "other"."""
    summed: dict[tuple[str, str], TenantLoad] = {}
    for replica in replicas:
        for load in replica.tenants:
            total = summed.setdefault((load.tenant, load.priority), TenantLoad(load.tenant, load.priority))
            total.admitted_tokens += load.admitted_tokens
            total.queued += load.queued
            for reason, count in load.refused.items():
                total.refused[reason] = total.refused.get(reason, 0.0) + count
    busy = [t for t in summed.values() if not t.idle]
    busy.sort(key=lambda t: (-t.refused_total, -t.admitted_tokens, _class_rank(t.priority), t.tenant))
    return busy[:rows]


def _class_rank(priority: str) -> int:
    known = as_priority(priority)
    return rank(known) if known is not None else len(PRIORITIES)
