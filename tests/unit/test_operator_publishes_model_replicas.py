"""The operator publishes each autoscaled model's replicas (current, desired, min, max) for the
KvantAtMaxReplicasAndShedding alert and the dashboard, and drops them once autoscaling or the model
is gone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

from kvant_contracts.autoscaling import DEMAND_GAUGE
from kvant_operator import operator_metrics

FILES = Path(__file__).resolve().parents[2] / "charts" / "kvant" / "files"


def _value(model: str, state: str) -> float | None:
    labels = {"namespace": "ns", "model": model, "state": state}
    return REGISTRY.get_sample_value("kvant_operator_model_replicas", labels)


def _states(model: str) -> dict[str, float | None]:
    return {state: _value(model, state) for state in ("current", "desired", "min", "max")}


def test_replicas_are_published_and_updated() -> None:
    operator_metrics.publish_replicas("ns", "scaled", current=2, desired=3, minimum=1, maximum=3)
    assert _states("scaled") == {"current": 2.0, "desired": 3.0, "min": 1.0, "max": 3.0}

    operator_metrics.publish_replicas("ns", "scaled", current=3, desired=3, minimum=1, maximum=3)
    assert _value("scaled", "current") == 3.0
    operator_metrics.forget_model("ns", "scaled")


def test_removing_autoscaling_drops_the_series_but_not_the_conditions() -> None:
    operator_metrics.publish_conditions("ns", "unscaled", [{"type": "Stalled", "status": "False"}])
    operator_metrics.publish_replicas("ns", "unscaled", current=1, desired=1, minimum=1, maximum=4)

    operator_metrics.forget_replicas("ns", "unscaled")
    assert set(_states("unscaled").values()) == {None}
    condition = {"namespace": "ns", "model": "unscaled", "condition": "Stalled", "status": "False"}
    assert REGISTRY.get_sample_value("kvant_operator_model_condition", condition) == 1.0
    operator_metrics.forget_model("ns", "unscaled")


def test_a_deleted_model_leaves_no_replica_series() -> None:
    operator_metrics.publish_replicas("ns", "deleted", current=2, desired=2, minimum=1, maximum=2)
    operator_metrics.forget_model("ns", "deleted")
    assert set(_states("deleted").values()) == {None}


def test_forgetting_a_model_never_scaled_is_harmless() -> None:
    operator_metrics.forget_replicas("ns", "never")
    operator_metrics.forget_model("ns", "never")
    assert set(_states("never").values()) == {None}


def test_the_alert_and_the_dashboard_read_what_the_operator_publishes() -> None:
    """YAML and JSON cannot import the names: this holds them to the operator's metric and states,
    and the dashboard's demand to the autoscaling contract's gauge."""
    (family,) = operator_metrics.MODEL_REPLICAS.collect()
    rules = yaml.safe_load((FILES / "kvant-alerts.yaml").read_text())
    (alert,) = [
        r for g in rules["groups"] for r in g["rules"] if r["alert"] == "KvantAtMaxReplicasAndShedding"
    ]
    assert set(re.findall(rf'{family.name}{{state="(\w+)"}}', alert["expr"])) == {"current", "max"}
    assert {"current", "max"} <= set(operator_metrics.MODEL_REPLICAS.STATES)

    dashboard = json.loads((FILES / "kvant-dashboard.json").read_text())
    (panel,) = [p for p in dashboard["panels"] if p["title"].startswith("Replicas")]
    exprs = [t["expr"] for t in panel["targets"]]
    assert any(e.startswith(f"max by (state) ({family.name}{{") for e in exprs)
    assert any(f"avg({DEMAND_GAUGE}{{" in e for e in exprs)
