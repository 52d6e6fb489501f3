"""Each model's NetworkPolicy opens the gate's serving port (to the namespaces the chart names, or to
any source), the metrics port to monitoring and the operator, the model's own pods to each other,
and nothing else; the engine's port is never opened. With a router, the serving port is the
router's, and the engines take serving traffic only from the model's own pods."""

from __future__ import annotations

from dataclasses import replace

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_contracts.serving_pod import ENGINE_PORT, GATE_PORT, METRICS_PORT
from kvant_operator.render.network_policy import network_policies
from kvant_operator.render.roles import Role, RoleKind
from kvant_operator.render.router import MESH_PORT
from kvant_operator.settings import OperatorSettings
from tests.unit.render_inputs import body

DEFAULTS = OperatorSettings()


ROUTER = Role("router", RoleKind.ROUTER, 2, KvCacheDtype.FP8_E4M3, [])


def network_policy(body: dict, settings: OperatorSettings) -> dict:
    (policy,) = network_policies(body, settings, None)
    return policy


def _ports(policy: dict) -> list[int]:
    return [p["port"] for rule in policy["spec"]["ingress"] for p in rule.get("ports", [])]


def test_the_gate_is_open_to_any_source_by_default_and_the_engine_never() -> None:
    policy = network_policy(body(), DEFAULTS)
    serving, metrics, peers = policy["spec"]["ingress"]
    assert serving == {"ports": [{"protocol": "TCP", "port": GATE_PORT}]}  # no `from`: any source
    assert metrics["ports"] == [{"protocol": "TCP", "port": METRICS_PORT}]
    values = metrics["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert values == ["kvant-system", "monitoring"]
    assert peers == {"from": [{"podSelector": {"matchLabels": {"kvant.dev/model": "tiny"}}}]}
    assert ENGINE_PORT not in _ports(policy)
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "kvant.dev/model": "tiny",
        "kvant.dev/component": "engine",
    }


def test_the_chart_can_limit_the_gate_to_named_namespaces() -> None:
    settings = replace(DEFAULTS, serving_from=("apps", "batch-jobs"), operator_namespace="ops")
    serving, metrics, _ = network_policy(body(), settings)["spec"]["ingress"]
    assert serving["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["apps", "batch-jobs"]
    assert metrics["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring", "ops"]


def test_settings_read_the_chart_environment(monkeypatch) -> None:
    monkeypatch.setenv("KVANT_SERVING_FROM", "apps, web")
    monkeypatch.setenv("KVANT_METRICS_FROM", "")
    monkeypatch.setenv("POD_NAMESPACE", "kvant")
    settings = OperatorSettings.from_env()
    assert (settings.serving_from, settings.metrics_from, settings.operator_namespace) == (
        ("apps", "web"),
        (),
        "kvant",
    )


def test_with_a_router_only_the_router_takes_clients_and_the_engines_take_the_models_own_pods() -> None:
    engines, router = network_policies(body(), DEFAULTS, ROUTER)
    metrics, peers = engines["spec"]["ingress"]  # no serving rule: clients cannot go around the router
    assert metrics["ports"] == [{"protocol": "TCP", "port": METRICS_PORT}]
    assert peers == {"from": [{"podSelector": {"matchLabels": {"kvant.dev/model": "tiny"}}}]}
    assert router["spec"]["podSelector"]["matchLabels"] == {
        "kvant.dev/model": "tiny",
        "kvant.dev/component": "router",
    }
    serving, router_metrics, mesh = router["spec"]["ingress"]
    assert serving == {"ports": [{"protocol": "TCP", "port": GATE_PORT}]}
    assert router_metrics == metrics
    # smg's mesh port is for the other router replicas only.
    assert mesh["ports"] == [{"protocol": "TCP", "port": MESH_PORT}]
    assert mesh["from"] == [{"podSelector": {"matchLabels": router["spec"]["podSelector"]["matchLabels"]}}]
    assert engines["metadata"]["name"] != router["metadata"]["name"]
