"""The operator plans with the same KV-scale rule calibration writes by: an architecture whose scales
SGLang would not load is refused at plan time, naming it and the SGLang version, and a published
artifact's KVScales condition says which path SGLang loads the scales by."""

from __future__ import annotations

from typing import Any

import pytest

from kvant_contracts.kv_scale_paths import SGLANG_VERSION
from kvant_operator.api.status import ArtifactStatus, Phase
from kvant_operator.artifact_recipe import artifact_key
from kvant_operator.hashing import digest
from kvant_operator.reconcile.artifact_step import ensure_artifact
from kvant_operator.reconcile.plan_step import ensure_plan
from kvant_operator.reconcile.state import Blocked, Pass
from kvant_operator.render import jobs
from kvant_operator.render.artifact_record import artifact_record
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import SETTINGS, body, condition, new_pass


def planned_pass(architecture: str, **spec: Any) -> Pass:
    p = new_pass(body(**spec), planned=True)
    assert p.plan is not None
    p.plan = p.plan.model_copy(
        update={"architecture": architecture, "inputs": digest(jobs.plan_inputs(p.spec))}
    )
    return p


@pytest.mark.parametrize("architecture", ["Qwen3NextForCausalLM", "MysteryForCausalLM"])
def test_calibrating_an_architecture_sglang_would_not_load_is_refused_at_plan_time(architecture: str) -> None:
    p, kube = planned_pass(architecture), MemoryKube()
    with pytest.raises(Blocked) as blocked:
        ensure_plan(p, kube, SETTINGS)
    assert blocked.value.phase is Phase.FAILED and kube.created == []
    degraded = condition(p, "Degraded")
    assert degraded.reason == "KVScalesNotLoadable"
    assert architecture in degraded.message and f"SGLang {SGLANG_VERSION}" in degraded.message
    assert "scales: unit" in condition(p, "Progressing").message


def test_unit_scales_are_not_refused_for_the_same_architecture() -> None:
    p = planned_pass(
        "Qwen3NextForCausalLM", weights={"format": "bf16"}, kvCache={"dtype": "fp8_e4m3", "scales": "unit"}
    )
    ensure_plan(p, MemoryKube(), SETTINGS)
    ensure_artifact(p, MemoryKube(), SETTINGS)
    assert (condition(p, "KVScales").reason, condition(p, "KVScales").status) == ("UnitScales", "True")


@pytest.mark.parametrize(
    ("architecture", "reason", "name"),
    [
        ("Qwen2ForCausalLM", "CalibratedExactNames", "self_attn.attn.k_scale"),
        ("LlamaForCausalLM", "CalibratedRemappedNames", "self_attn.k_scale"),
        ("DeepseekV3ForCausalLM", "CalibratedExactNames", "self_attn.attn_mqa.k_scale"),
    ],
)
def test_a_published_artifact_says_which_path_loads_its_scales(
    architecture: str, reason: str, name: str
) -> None:
    p, kube = planned_pass(architecture), MemoryKube()
    ensure_plan(p, kube, SETTINGS)
    key = artifact_key(p.spec)
    kube.create(
        artifact_record(p.body, key, ArtifactStatus(uri="pvc://kvant-artifacts/x", digest="sha256:abc"))
    )
    ensure_artifact(p, kube, SETTINGS)
    kv_scales = condition(p, "KVScales")
    assert (kv_scales.status, kv_scales.reason) == ("True", reason)
    assert architecture in kv_scales.message and name in kv_scales.message
