"""One protection step for one model: read KV pressure, decide, and say what was decided.

The result is folded into the same status write as the reconcile (one writer per model), and the
effective concurrency reaches the gates through the limits ConfigMap, which they reload live.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from kvant_contracts.kube_object import Obj
from kvant_contracts.limits import ProtectionMode
from kvant_contracts.serving_pod import METRICS_PORT
from kvant_operator import operator_metrics
from kvant_operator.api.spec import QuantizedModelSpec
from kvant_operator.api.status import ConditionStatus
from kvant_operator.kube_door import KubeDoor
from kvant_operator.protection.decide import Bounds, Sample, decide
from kvant_operator.protection.samples import CounterMemory, MetricsUnavailable, query_prometheus, scrape_pods
from kvant_operator.render.roles import engine_roles, engine_selector, workload_name


@dataclass
class ProtectionResult:
    status: Obj  # status.protection
    condition: tuple[ConditionStatus, str, str]  # CacheProtected: status, reason, message
    events: list[tuple[str, str, str]] = field(default_factory=list)
    usage: dict[str, float] = field(default_factory=dict)  # each sampled pod's KV token usage

    @property
    def effective_concurrency(self) -> int | None:
        value = self.status.get("effectiveConcurrency")
        return int(value) if value is not None else None


class Protector:
    def __init__(self, kube: KubeDoor) -> None:
        self.kube = kube

    def step(
        self, body: Obj, spec: QuantizedModelSpec, memory: CounterMemory, now: datetime
    ) -> ProtectionResult | None:
        previous: Obj = dict((body.get("status") or {}).get("protection") or {})
        protection = spec.protection
        if protection.mode is ProtectionMode.OFF:
            return ProtectionResult(
                {"effectiveConcurrency": None, "lastDecision": "protection is off"},
                (ConditionStatus.FALSE, "ProtectionOff", "spec.protection.mode is off"),
            )
        try:
            samples = self._samples(body, spec, memory)
        except MetricsUnavailable as err:
            return self._unavailable(previous, str(err))
        if not samples:
            return None  # nothing serves yet
        return self._decide(previous, spec, samples, now)

    def _samples(self, body: Obj, spec: QuantizedModelSpec, memory: CounterMemory) -> list[Sample]:
        namespace, model = body["metadata"]["namespace"], body["metadata"]["name"]
        url = spec.protection.metrics.prometheus_url
        if url:
            names = "|".join(workload_name(model, r) for r in engine_roles(spec))
            stale_after = 3.0 * spec.protection.metrics.interval_seconds + 15.0
            return query_prometheus(url, namespace, f"({names})-.*", stale_after)
        pods = self.kube.list("v1", "Pod", namespace, engine_selector(model))
        ready = [(p["metadata"]["name"], p["status"]["podIP"]) for p in pods if _ready(p)]
        return scrape_pods(ready, METRICS_PORT, memory)

    def _unavailable(self, previous: Obj, why: str) -> ProtectionResult:
        message = f"{why}; the limits in force stay, and each pod's gate keeps protecting its engine locally"
        status = {**previous, "lastDecision": f"no decision: {why}"[:1024]}
        return ProtectionResult(status, (ConditionStatus.UNKNOWN, "MetricsUnavailable", message))

    def _decide(
        self, previous: Obj, spec: QuantizedModelSpec, samples: list[Sample], now: datetime
    ) -> ProtectionResult:
        p = spec.protection
        ceiling = p.concurrency.max or spec.limits.max_concurrency
        bounds = Bounds(
            min(p.concurrency.min, ceiling), ceiling, p.target_token_usage, p.max_retractions_per_minute
        )
        current = int(previous.get("effectiveConcurrency") or ceiling)
        decision = decide(current, samples, bounds)
        worst = max(s.token_usage for s in samples)
        rates = [s.retractions_per_minute for s in samples if s.retractions_per_minute is not None]
        status: Obj = {
            "effectiveConcurrency": decision.concurrency if p.mode is ProtectionMode.ENFORCE else None,
            "tokenUsage": round(worst, 2),
            "retractionsPerMinute": round(sum(rates), 1) if rates else None,
            "lastDecision": previous.get("lastDecision"),
            "lastDecisionTime": previous.get("lastDecisionTime"),
        }
        events = []
        if decision.changed_from(current):
            enforced = p.mode is ProtectionMode.ENFORCE
            text = decision.reason if enforced else f"observe only, would apply: {decision.reason}"
            status["lastDecision"], status["lastDecisionTime"] = (
                text[:1024],
                now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
            lowered = decision.concurrency < current
            events.append(
                (
                    "Warning" if lowered else "Normal",
                    "ConcurrencyLowered" if lowered else "ConcurrencyRaised",
                    text,
                )
            )
            operator_metrics.PROTECTION_DECISIONS.labels("down" if lowered else "up").inc()
        protected = worst <= p.target_token_usage and not any(
            (s.retractions_per_minute or 0) > p.max_retractions_per_minute for s in samples
        )
        reason = (
            "Observing"
            if p.mode is ProtectionMode.OBSERVE
            else ("WithinTarget" if protected else "KVPressure")
        )
        message = (
            f"worst KV usage {worst:.2f} (target {p.target_token_usage:.2f}) over {len(samples)} replica(s); "
            f"effective concurrency {decision.concurrency}"
        )
        condition = (ConditionStatus.TRUE if protected else ConditionStatus.FALSE, reason, message)
        return ProtectionResult(status, condition, events, {s.replica: s.token_usage for s in samples})


def _ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return bool(status.get("podIP")) and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )
