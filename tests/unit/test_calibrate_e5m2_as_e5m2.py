"""An e5m2 KV cache is calibrated and validated as e5m2, not as e4m3.

SGLang 0.5.23 applies checkpoint k_scale/v_scale to either FP8 cache (`BaseKVCacheMethod` loads them
whatever the dtype, and the pool divides by them before casting), but reads a
`--quantization-param-path` JSON only for fp8_e4m3 (`load_kv_cache_scales`), whose schema asserts
float8_e4m3fn. So: the scales map the calibrated absmax (with its margin) onto e5m2's largest value,
57344; no JSON is written; the manifest records the format; and the accuracy gate emulates e5m2.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvant_kernels.kv_scales import SAFETY_MARGIN
from kvant_runtime.calibrate.calibrator import calibrate
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.launch.argv import KV_SCALES_JSON
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.calibrate_harness import CALIBRATION, evaluated, int4_artifact, read_tensor

E5M2_MAX = 57344.0


def test_e5m2_scales_map_onto_e5m2s_range_and_skip_the_e4m3_only_json(tmp_path):
    artifact = int4_artifact("llama", tmp_path / "int4")
    result = calibrate(artifact, replace(CALIBRATION, kv_dtype="fp8_e5m2"), lambda _: None)

    assert result["kvCacheDtype"] == "fp8_e5m2"
    assert result["kvScalePaths"] == ["remap"]  # Llama's JSON path is e4m3-only in SGLang
    assert not (artifact / KV_SCALES_JSON).exists()
    for layer in result["layers"]:
        k = read_tensor(artifact, f"model.layers.{layer['layer']}.self_attn.k_scale").item()
        assert k == pytest.approx(layer["kAbsmax"] * SAFETY_MARGIN / E5M2_MAX, rel=1e-6)


def test_the_gate_emulates_e5m2_and_it_costs_more_than_e4m3(tmp_path):
    reference = tiny_checkpoint("llama")
    e4m3 = int4_artifact("llama", tmp_path / "e4m3")
    calibrate(e4m3, CALIBRATION, lambda _: None)
    e5m2 = int4_artifact("llama", tmp_path / "e5m2")
    calibrate(e5m2, replace(CALIBRATION, kv_dtype="fp8_e5m2"), lambda _: None)

    as_e4m3 = evaluated(reference, e4m3, kv_dtype="fp8_e4m3")
    as_e5m2 = evaluated(reference, e5m2, kv_dtype="fp8_e5m2")
    assert as_e5m2["kvCacheDtype"] == "fp8_e5m2"
    # Two mantissa bits against three: e5m2's rounding error is about twice e4m3's, and shows.
    assert as_e5m2["meanKLDivergence"] > as_e4m3["meanKLDivergence"]


def test_an_unknown_kv_format_is_refused_before_anything_changes(tmp_path):
    artifact = int4_artifact("llama", tmp_path / "int4")
    with pytest.raises(CheckpointError, match="--kv-dtype 'fp8_e3m4'"):
        calibrate(artifact, replace(CALIBRATION, kv_dtype="fp8_e3m4"), lambda _: None)
    assert (artifact / "kvant-manifest.json").is_file()  # still published: nothing was touched
