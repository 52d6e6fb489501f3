"""status.autoscaling: what the model's HorizontalPodAutoscaler reports, read from the operator's
index of it (no request), with its most telling condition put in words for the on-call engineer."""

from __future__ import annotations

from datetime import datetime

from kvant_contracts.autoscaling import DEMAND_METRIC
from kvant_contracts.kube_object import Obj
from kvant_operator.api.status import AutoscalingStatus
from kvant_operator.kube_door import KubeDoor
from kvant_operator.reconcile.state import Pass
from kvant_operator.render.autoscaler import HPA

METRICS_MISSING = (
    f"the cluster's custom metrics API does not serve {DEMAND_METRIC}, so replicas stay as they are: "
    "install prometheus-adapter with Kvant's rule (docs/concepts/autoscaling.md)"
)


def read_autoscaling(p: Pass, kube: KubeDoor) -> AutoscalingStatus | None:
    scaling = p.spec.autoscaling
    if scaling is None:
        return None
    live = kube.get(HPA[0], HPA[1], p.namespace, p.model) or {}
    status = live.get("status") or {}
    reason, message = _telling(status.get("conditions") or [])
    return AutoscalingStatus(
        min_replicas=scaling.min_replicas,
        max_replicas=scaling.max_replicas,
        current_replicas=status.get("currentReplicas", 0),
        desired_replicas=status.get("desiredReplicas", 0),
        last_scale_time=_time(status.get("lastScaleTime")),
        reason=reason,
        message=message[:1024],
    )


def _telling(conditions: list[Obj]) -> tuple[str, str]:
    """Metrics it cannot read first (nothing scales), then a bound it is held at, then how the last
    step went; before the HPA controller has looked at it, that it has not."""
    by_type = {c.get("type"): c for c in conditions}
    active = by_type.get("ScalingActive")
    if active is not None and active.get("status") == "False":
        said = active.get("message") or ""
        if "metric" in (active.get("reason") or "").lower() or DEMAND_METRIC in said:
            return "MetricsUnavailable", f"{METRICS_MISSING}; the autoscaler says: {said}"
        return active.get("reason") or "ScalingInactive", active.get("message") or ""
    limited = by_type.get("ScalingLimited")
    if limited is not None and limited.get("status") == "True":
        return limited.get("reason") or "ScalingLimited", limited.get("message") or ""
    able = by_type.get("AbleToScale")
    if able is not None:
        return able.get("reason") or "AbleToScale", able.get("message") or ""
    return "Pending", "the autoscaler has not reported yet"


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None
