"""An unknown architecture gives Degraded with a clear message, and other models keep being served."""

from __future__ import annotations

import json

import pytest
from tests.kube_wait import wait_for

from e2e.qm import apply, condition, get_qm, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def test_unknown_architecture_is_degraded_while_good_model_gets_ready(
    cluster, operator, namespace, tiny_model, node_dir
):
    broken = node_dir / "mystery-model"
    broken.host.mkdir()
    (broken.host / "config.json").write_text(
        json.dumps({"architectures": ["MysteryForCausalLM"], "hidden_size": 64})
    )
    bad = tiny_model("mystery", kvCache={"dtype": "bf16"})
    bad["spec"]["source"]["uri"] = broken.uri
    apply(cluster, namespace, bad)
    apply(cluster, namespace, tiny_model("good", kvCache={"dtype": "bf16"}))
    # Calibrated FP8 scales need an artifact to write into; bf16 weights convert nothing.
    apply(cluster, namespace, tiny_model("uncalibratable", weights={"format": "bf16"}))

    def degraded() -> dict | None:
        found = condition(get_qm(cluster, namespace, "mystery"), "Degraded")
        return found if found and found["status"] == "True" else None

    cond = wait_for(degraded, 120, "qm/mystery to turn Degraded")
    assert cond["reason"] == "PlanFailed"
    assert "MysteryForCausalLM" in cond["message"]
    assert get_qm(cluster, namespace, "mystery")["status"]["phase"] == "Failed"
    wait_ready(cluster, namespace, "good")

    def refused() -> dict | None:
        found = condition(get_qm(cluster, namespace, "uncalibratable"), "Degraded")
        return found if found and found["reason"] == "CalibrationNeedsConversion" else None

    assert "scales: checkpoint" in wait_for(refused, 60, "qm/uncalibratable to be refused")["message"]
