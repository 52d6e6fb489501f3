"""Serving roles as data: what each role is (its kind), how many replicas it has, and its labels.

Everything that must find "the engines of a model" (protection's scrape, the scale subresource's
selector, metrics discovery and, with the router, smg's worker discovery) selects by the kind label
`kvant.dev/component`, never by the presence of a role label: a router role is not an engine, and
must not be scraped as one or counted as a replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kvant_contracts.kube_object import Obj
from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_operator.api.spec import DisaggregationMode, QuantizedModelSpec, RoleSpec
from kvant_operator.object_keys import KIND_LABEL, MODEL_LABEL, ROLE_LABEL, SERVING_COMPONENT
from kvant_operator.render.meta import object_meta


class RoleKind(StrEnum):
    """engine: pods that run the engine with its gate (the gate is a container in these pods, not a
    role of its own). router: pods that spread a model's traffic over its engines."""

    ENGINE = "engine"
    ROUTER = "router"


@dataclass(frozen=True)
class Role:
    """One serving role: `serve` (no disaggregation), or `prefill` / `decode`."""

    name: str
    kind: RoleKind
    replicas: int
    kv_cache_dtype: KvCacheDtype
    engine_args: list[str]

    @property
    def disaggregation(self) -> str | None:
        """The engine's --disaggregation-mode, None when it both prefills and decodes."""
        return self.name if self.name in ("prefill", "decode") else None

    def selector(self, model: str) -> dict[str, str]:
        """The Deployment's selector. It is immutable once created, so it never grows new labels."""
        return {MODEL_LABEL: model, ROLE_LABEL: self.name}

    def labels(self, model: str) -> dict[str, str]:
        return {**self.selector(model), KIND_LABEL: self.kind.value}


def roles(spec: QuantizedModelSpec) -> list[Role]:
    serving = spec.serving
    if serving.disaggregation.mode is DisaggregationMode.NONE:
        return [
            Role("serve", RoleKind.ENGINE, serving.replicas, spec.kv_cache.dtype, list(serving.engine_args))
        ]
    pd = serving.disaggregation

    def engine(name: str, r: RoleSpec) -> Role:
        dtype = r.kv_cache_dtype or spec.kv_cache.dtype
        return Role(name, RoleKind.ENGINE, r.replicas, dtype, [*serving.engine_args, *r.engine_args])

    return [engine("prefill", pd.prefill), engine("decode", pd.decode)]


def engine_roles(spec: QuantizedModelSpec) -> list[Role]:
    return [r for r in roles(spec) if r.kind is RoleKind.ENGINE]


def workload_name(model: str, role: Role) -> str:
    return model if role.name == "serve" else f"{model}-{role.name}"


def engine_selector(model: str) -> str:
    """The engine pods of every engine role, as a label selector string."""
    return f"{MODEL_LABEL}={model},{KIND_LABEL}={RoleKind.ENGINE.value}"


def role_deployment(meta: Obj, role: Role, model: str, pod_spec: Obj, annotations: dict[str, str]) -> Obj:
    """One role's Deployment. Old pods keep serving until new ones are Ready: a model load (or a
    router's discovery) takes a while, so a rollout never takes a replica away first."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": role.replicas,
            "selector": {"matchLabels": role.selector(model)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": dict(meta["labels"]), "annotations": annotations},
                "spec": pod_spec,
            },
        },
    }


def disruption_budget(body: Obj, role: Role) -> Obj:
    """One role's PodDisruptionBudget: a voluntary disruption takes at most one of its pods."""
    model = body["metadata"]["name"]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(body, workload_name(model, role), SERVING_COMPONENT),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": role.selector(model)}},
    }
