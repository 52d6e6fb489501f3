"""The limits ConfigMap: what the gate enforces, reloaded live (no restart) when it changes.

Field names are the CR's. `concurrency.max` is the ceiling in force: the spec's bound, lowered
by the operator's protection loop when it decides so (status.protection.effectiveConcurrency).
"""

from __future__ import annotations

from typing import cast

from kvant_contracts.kube_object import Obj
from kvant_contracts.limits import LIMITS_FILE, ConcurrencyBounds, Limits, render_limits
from kvant_contracts.tenancy import Priority, Tenancy, Tenant
from kvant_operator.api.spec import QuantizedModelSpec, TenancySpec
from kvant_operator.render.meta import object_meta

__all__ = ["LIMITS_FILE", "limits_configmap", "limits_for", "limits_name"]


def limits_name(model: str) -> str:
    return f"{model}-limits"


def limits_for(spec: QuantizedModelSpec, effective_concurrency: int | None) -> Limits:
    """The limits the gate enforces for `spec`, as the one contract type the gate parses back."""
    ceiling = spec.protection.concurrency.max or spec.limits.max_concurrency
    if effective_concurrency is not None:
        ceiling = max(spec.protection.concurrency.min, min(ceiling, effective_concurrency))
    return Limits(
        mode=spec.protection.mode.value,
        maxConcurrency=spec.limits.max_concurrency,
        maxQueued=spec.limits.max_queued,
        queueTimeoutSeconds=float(spec.limits.queue_timeout_seconds),
        targetTokenUsage=spec.protection.target_token_usage,
        maxRetractionsPerMinute=spec.protection.max_retractions_per_minute,
        concurrency=ConcurrencyBounds(min=min(spec.protection.concurrency.min, ceiling), max=ceiling),
        defaultMaxTokens=spec.limits.default_max_tokens,
        oversizeRequests=spec.limits.oversize_requests,
        admission=spec.limits.admission,
        forecastQuantile=spec.limits.forecast_quantile,
        tenancy=tenancy_for(spec.tenancy),
    )


def tenancy_for(tenancy: TenancySpec) -> Tenancy:
    """spec.tenancy as the contract's Tenancy; a tenant without a class gets the default class."""
    default = cast(Priority, tenancy.default_priority.value)
    return Tenancy(
        defaultPriority=default,
        tenants=tuple(
            Tenant(
                name=t.name,
                priority=cast(Priority, t.priority.value) if t.priority is not None else default,
                weight=t.weight,
                tokensPerMinute=t.tokens_per_minute,
            )
            for t in tenancy.tenants
        ),
        outputTokenWeight=tenancy.output_token_weight,
        sheddableQueueShare=tenancy.sheddable_queue_share,
        criticalReserve=tenancy.critical_reserve,
    )


def limits_configmap(body: Obj, spec: QuantizedModelSpec, effective_concurrency: int | None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(body, limits_name(body["metadata"]["name"]), "limits"),
        "data": {LIMITS_FILE: render_limits(limits_for(spec, effective_concurrency))},
    }
