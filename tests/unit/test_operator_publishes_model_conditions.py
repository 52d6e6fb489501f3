"""The operator publishes each model's conditions for the alerts: 1 for the current status, 0 for the
others, and nothing left behind once the model is gone."""

from __future__ import annotations

from prometheus_client import REGISTRY

from kvant_operator import operator_metrics


def _value(model: str, condition: str, status: str) -> float | None:
    labels = {"namespace": "ns", "model": model, "condition": condition, "status": status}
    return REGISTRY.get_sample_value("kvant_operator_model_condition", labels)


def test_conditions_are_published_updated_and_forgotten() -> None:
    operator_metrics.publish_conditions(
        "ns", "m", [{"type": "Stalled", "status": "True"}, {"type": "CacheProtected", "status": "Unknown"}]
    )
    assert (_value("m", "Stalled", "True"), _value("m", "Stalled", "False")) == (1.0, 0.0)
    assert _value("m", "CacheProtected", "Unknown") == 1.0

    operator_metrics.publish_conditions("ns", "m", [{"type": "Stalled", "status": "False"}])
    assert (_value("m", "Stalled", "True"), _value("m", "Stalled", "False")) == (0.0, 1.0)
    assert _value("m", "CacheProtected", "Unknown") is None  # no longer reported: no stale series

    operator_metrics.forget_model("ns", "m")
    assert _value("m", "Stalled", "False") is None
