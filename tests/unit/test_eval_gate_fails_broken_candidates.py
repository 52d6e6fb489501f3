"""`kvant eval` passes a sound INT4 + calibrated FP8 KV candidate and fails broken ones, naming the
metric and the threshold.

Broken candidates (bytes edited in place, so every file keeps the size its manifest lists):
- one layer's KV scales made 100x too small, so K/V saturate in the simulated e4m3 cache;
- one weight tensor zeroed (its INT4 group scales set to 0).
Scales 100x too large are not among them: e4m3 is floating point, so shrinking K/V by 100 costs
only the smallest values, and the candidate stays close (checked below too).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kvant_runtime.checkpoint.errors import CheckpointError
from tests.tiny_checkpoints import copy_checkpoint, tiny_checkpoint
from tests.unit.calibrate_harness import calibrated, evaluated, int4_artifact, overwrite_tensor, read_tensor
from tests.unit.convert_harness import kvant

# Between a sound tiny candidate (mean KL about 6e-4) and the broken ones (above 1e-2).
MAX_KL = 0.004


def scaled_layer(candidate: Path, destination: Path, layer_names: list[str], factor: float) -> Path:
    broken = copy_checkpoint(candidate, destination)
    for name in layer_names:
        overwrite_tensor(broken, name, read_tensor(broken, name) * factor)
    return broken


@pytest.fixture(scope="module")
def llama_candidate(tmp_path_factory):
    candidate = tmp_path_factory.mktemp("eval") / "int4"
    calibrated("llama", candidate)
    return tiny_checkpoint("llama"), candidate


def test_sound_candidate_passes_with_its_calibrated_scales(llama_candidate):
    reference, candidate = llama_candidate
    result = evaluated(reference, candidate, kv_dtype="fp8_e4m3", max_kl_divergence=MAX_KL)
    assert result["passed"] and result["failure"] is None
    assert result["kvScales"] == "checkpoint"
    assert 0 < result["meanKLDivergence"] <= result["p99KLDivergence"]
    assert result["top1Agreement"] > 0.7


def test_saturating_scales_in_one_layer_fail_the_gate(llama_candidate, tmp_path):
    reference, candidate = llama_candidate
    names = ["model.layers.0.self_attn.k_scale", "model.layers.0.self_attn.v_scale"]
    broken = scaled_layer(candidate, tmp_path / "broken", names, 0.01)
    result = evaluated(reference, broken, kv_dtype="fp8_e4m3", max_kl_divergence=MAX_KL)
    assert not result["passed"]
    assert result["failure"].startswith("meanKLDivergence ")
    assert f"exceeds maxKLDivergence {MAX_KL:g}" in result["failure"]
    sound = evaluated(reference, candidate, kv_dtype="fp8_e4m3")
    assert result["top1Agreement"] < sound["top1Agreement"] - 0.3


def test_scales_100x_too_large_cost_little(llama_candidate, tmp_path):
    reference, candidate = llama_candidate
    names = ["model.layers.0.self_attn.k_scale", "model.layers.0.self_attn.v_scale"]
    coarse = scaled_layer(candidate, tmp_path / "coarse", names, 100.0)
    assert evaluated(reference, coarse, kv_dtype="fp8_e4m3", max_kl_divergence=MAX_KL)["passed"]


def test_zeroed_weight_fails_the_gate_via_the_cli(llama_candidate, tmp_path):
    reference, candidate = llama_candidate
    broken = copy_checkpoint(candidate, tmp_path / "zeroed")
    name = "model.layers.0.self_attn.o_proj.weight_scale"
    overwrite_tensor(broken, name, torch.zeros_like(read_tensor(broken, name)))

    gate = ("--max-kl-divergence", str(MAX_KL))
    run = kvant("eval", reference, broken, *gate, "--samples", "4", "--sequence-length", "256")

    assert run.returncode == 1, run.stderr
    assert "gate failed: meanKLDivergence" in run.stderr and f"maxKLDivergence {MAX_KL:g}" in run.stderr
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["passed"] is False and result["failure"] in run.stderr
    assert result["candidateDigest"].startswith("sha256:")


def test_mla_candidate_with_saturating_scales_fails(tmp_path):
    candidate = tmp_path / "int4"
    calibrated("deepseek_v3", candidate)
    reference = tiny_checkpoint("deepseek_v3")
    names = ["model.layers.1.self_attn.attn_mqa.k_scale", "model.layers.1.self_attn.attn_mqa.v_scale"]
    broken = scaled_layer(candidate, tmp_path / "broken", names, 0.01)
    sound = evaluated(reference, candidate, kv_dtype="fp8_e4m3", max_kl_divergence=MAX_KL)
    failed = evaluated(reference, broken, kv_dtype="fp8_e4m3", max_kl_divergence=MAX_KL)
    assert sound["passed"], sound
    assert not failed["passed"] and failed["failure"].startswith("meanKLDivergence")


def test_fp8_without_scales_needs_an_explicit_unit_choice(tmp_path):
    reference = tiny_checkpoint("llama")
    uncalibrated = int4_artifact("llama", tmp_path / "int4")
    with pytest.raises(CheckpointError, match=r"no KV-cache scales.*--unit-scales"):
        evaluated(reference, uncalibrated, kv_dtype="fp8_e4m3")
    unit = evaluated(reference, uncalibrated, kv_dtype="fp8_e4m3", unit_scales=True)
    assert unit["kvScales"] == "unit"
