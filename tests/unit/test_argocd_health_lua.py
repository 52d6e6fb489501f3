"""gitops/argocd-health.lua, run by a real Lua 5.1 interpreter (the dialect of Argo CD's gopher-lua)
against QuantizedModel status fixtures: Healthy, Progressing (stale observedGeneration), Degraded, Unknown."""

from __future__ import annotations

from pathlib import Path

import pytest
from lupa import lua51

from kvant_contracts.kube_object import Obj

SCRIPT = (Path(__file__).resolve().parents[2] / "gitops" / "argocd-health.lua").read_text()


def health(obj: Obj) -> tuple[str, str]:
    lua = lua51.LuaRuntime()
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(SCRIPT)
    return str(result["status"]), str(result["message"])


def condition(type_: str, status: str, generation: int, message: str = "") -> Obj:
    return {
        "type": type_,
        "status": status,
        "reason": f"{type_}{status}",
        "message": message or f"{type_} is {status}",
        "observedGeneration": generation,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def model(generation: int, observed: int | None, *conditions: Obj, phase: str = "Ready") -> Obj:
    obj: Obj = {
        "apiVersion": "kvant.dev/v1alpha1",
        "kind": "QuantizedModel",
        "metadata": {"generation": generation},
    }
    if observed is not None:
        obj["status"] = {"observedGeneration": observed, "phase": phase, "conditions": list(conditions)}
    return obj


def test_ready_for_the_current_generation_is_healthy():
    obj = model(
        3,
        3,
        condition("Ready", "True", 3, "1/1 replicas ready"),
        condition("Progressing", "False", 3),
        condition("Degraded", "False", 3),
    )
    assert health(obj) == ("Healthy", "1/1 replicas ready")


def test_stale_observed_generation_is_progressing_even_when_ready():
    obj = model(4, 3, condition("Ready", "True", 3), condition("Degraded", "False", 3))
    status, message = health(obj)
    assert status == "Progressing"
    assert "generation 4" in message


def test_no_status_yet_is_progressing():
    assert health(model(1, None))[0] == "Progressing"


def test_progressing_condition_is_progressing_with_its_message():
    obj = model(
        2,
        2,
        condition("Ready", "False", 2),
        condition("Progressing", "True", 2, "converting: 3/8 shards"),
        phase="Converting",
    )
    assert health(obj) == ("Progressing", "converting: 3/8 shards")


@pytest.mark.parametrize("ready", ["True", "False"])
def test_degraded_wins_over_ready(ready):
    obj = model(
        5,
        5,
        condition("Ready", ready, 5),
        condition("Degraded", "True", 5, "conversion failed: source has no config.json"),
        condition("Progressing", "False", 5),
        phase="Degraded",
    )
    assert health(obj) == ("Degraded", "conversion failed: source has no config.json")


def test_conditions_of_an_older_generation_are_ignored():
    obj = model(6, 6, condition("Ready", "True", 5), condition("Degraded", "True", 5))
    status, message = health(obj)
    assert status == "Unknown"
    assert "generation 6" in message


def test_no_summary_condition_true_is_unknown():
    obj = model(2, 2, condition("Ready", "Unknown", 2), condition("Progressing", "False", 2), phase="Pending")
    status, message = health(obj)
    assert status == "Unknown"
    assert "Pending" in message
