"""Serving pods spread over nodes and zones, and leave a lost node when the CR says (issue #40 item 2).

Rendered for every serving role (engines, routers, prefill and decode): a topology spread and a soft
anti-affinity within the role, tolerations of a lost node when `lostNodeSeconds` is set (Kubernetes'
300 s otherwise), and a PodDisruptionBudget over the same pods; the router is Ready on smg's
/readiness, never /health.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kvant_operator.artifact_recipe import source_location
from kvant_operator.render.pod_placement import NODE_TOPOLOGY, ZONE_TOPOLOGY
from kvant_operator.render.router import ROUTER, ROUTER_READINESS_PATH
from kvant_operator.render.serving import ServingInputs, serving_objects
from kvant_operator.settings import OperatorSettings
from tests.unit.render_inputs import body, plan, spec_of


def _objects(example: str, **serving: Any) -> list[dict[str, Any]]:
    model = body(example)
    model["spec"]["serving"].update(serving)
    spec = spec_of(model)
    inputs = ServingInputs(model, spec, plan(), source_location(spec), "", OperatorSettings())
    return serving_objects(inputs, None)


def _deployments(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}


def _pod(deployment: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def _spread(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["topologyKey"]: c for c in pod.get("topologySpreadConstraints", [])}


def _lost_node_seconds(pod: dict[str, Any]) -> dict[str, int]:
    return {
        t["key"]: t["tolerationSeconds"]
        for t in pod.get("tolerations", [])
        if t.get("effect") == "NoExecute" and t.get("key", "").startswith("node.kubernetes.io/")
    }


@pytest.mark.parametrize(
    ("example", "serving", "expected"),
    [
        ("tiny.yaml", {"replicas": 3, "placement": {"spread": "preferred"}}, {"tiny", "tiny-router"}),
        (
            "llama-70b-prefill-decode-fp8kv.yaml",
            {"placement": {"spread": "preferred"}},
            {"llama-70b-pd-prefill", "llama-70b-pd-decode", "llama-70b-pd-router"},
        ),
    ],
)
def test_every_role_spreads_within_itself_and_has_a_disruption_budget(
    example: str, serving: dict[str, Any], expected: set[str]
) -> None:
    objects = _objects(example, **serving)
    deployments = _deployments(objects)
    assert set(deployments) == expected
    budgets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "PodDisruptionBudget"}
    for name, deployment in deployments.items():
        own = deployment["spec"]["selector"]
        pod = _pod(deployment)
        spread = _spread(pod)
        assert spread[NODE_TOPOLOGY]["labelSelector"] == own, name
        assert spread[NODE_TOPOLOGY]["whenUnsatisfiable"] == "ScheduleAnyway", name
        assert spread[NODE_TOPOLOGY]["maxSkew"] == 1, name
        (apart,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert apart["podAffinityTerm"] == {"topologyKey": NODE_TOPOLOGY, "labelSelector": own}, name
        disaggregated = name.endswith(("-prefill", "-decode"))
        # Prefill and decode stay together for the KV transfer: no zone spread, a pull towards the
        # zone of the model's engines instead. Everything else spreads over zones too.
        assert (ZONE_TOPOLOGY in spread) is not disaggregated, name
        assert ("podAffinity" in pod["affinity"]) is disaggregated, name
        # Unset: Kubernetes' own 300 s (its admission adds them), not a shorter one of Kvant's.
        assert _lost_node_seconds(pod) == {}, name
        assert budgets[name]["spec"]["selector"] == own, name
        assert budgets[name]["spec"]["maxUnavailable"] == 1, name


def test_the_router_is_ready_on_readiness_not_health() -> None:
    (router,) = [
        d for n, d in _deployments(_objects("tiny.yaml", replicas=3)).items() if n.endswith("-router")
    ]
    (container,) = [c for c in _pod(router)["containers"] if c["name"] == ROUTER]
    path = container["readinessProbe"]["httpGet"]["path"]
    assert path == ROUTER_READINESS_PATH
    assert path != "/health", "smg's /health answers 200 with no engine behind it"


def test_every_role_spreads_by_default_and_keeps_kubernetes_tolerations() -> None:
    """`preferred` unless the CR says otherwise; lost-node tolerations are Kubernetes' unless set."""
    deployments = _deployments(_objects("tiny.yaml", replicas=3))
    assert deployments, "tiny.yaml renders no Deployments"
    for name, deployment in deployments.items():
        pod = _pod(deployment)
        assert _spread(pod)[NODE_TOPOLOGY]["whenUnsatisfiable"] == "ScheduleAnyway", name
        assert pod["affinity"]["podAntiAffinity"], name
        assert "tolerations" not in pod, name


def test_spread_and_tolerations_follow_the_cr() -> None:
    placement = {
        "spread": "required",
        "lostNodeSeconds": 90,
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    deployments = _deployments(_objects("tiny.yaml", replicas=3, placement=placement))
    assert deployments, "tiny.yaml renders no Deployments"
    for name, deployment in deployments.items():
        pod = _pod(deployment)
        assert _spread(pod)[NODE_TOPOLOGY]["whenUnsatisfiable"] == "DoNotSchedule", name
        assert _spread(pod)[ZONE_TOPOLOGY]["whenUnsatisfiable"] == "ScheduleAnyway", name
        assert set(_lost_node_seconds(pod).values()) == {90}, name
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    unspread = _deployments(_objects("tiny.yaml", replicas=3, placement={"spread": "none"}))
    assert unspread, "tiny.yaml renders no Deployments"
    for name, deployment in unspread.items():
        pod = _pod(deployment)
        assert "topologySpreadConstraints" not in pod and "affinity" not in pod, name
        assert _lost_node_seconds(pod) == {}, name


@pytest.mark.parametrize(
    ("toleration", "field"),
    [
        ({"operator": "Equal", "value": "x"}, "tolerations[].key"),
        ({"key": "a", "operator": "Exists", "value": "x"}, "tolerations[].value"),
        ({"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}, "tolerations[].tolerationSeconds"),
    ],
)
def test_a_toleration_kubernetes_would_refuse_is_refused_naming_its_field(
    toleration: dict[str, Any], field: str
) -> None:
    model = body("tiny.yaml")
    model["spec"]["serving"]["placement"] = {"tolerations": [toleration]}
    with pytest.raises(ValidationError) as refused:
        spec_of(model)
    assert f"spec.serving.placement.{field}" in str(refused.value)
