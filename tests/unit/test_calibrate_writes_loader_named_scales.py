"""`kvant calibrate` writes positive k/v scales under the loader's names, declares the kv_cache_scheme,
and publishes the artifact under a new digest that its manifest verifies."""

from __future__ import annotations

import json

import pytest
import torch

from kvant_contracts.artifact_manifest import read_manifest, verify_artifact
from kvant_kernels.fp8 import FP8_E4M3_MAX
from kvant_kernels.kv_cache_scheme import KV_CACHE_SCHEME
from kvant_kernels.kv_scales import SAFETY_MARGIN
from kvant_runtime.calibrate.calibrator import calibrate
from kvant_runtime.calibrate.scales_publish import SCALES_FILE
from kvant_runtime.checkpoint.staging import STAGING_DIR
from kvant_runtime.launch.argv import KV_SCALES_JSON
from tests.unit.calibrate_harness import CALIBRATION, calibrated, read_tensor, weight_map

EXPECTED_NAMES = {
    "llama": [f"model.layers.{i}.self_attn.{kind}_scale" for i in range(2) for kind in "kv"],
    "qwen2": [f"model.layers.{i}.self_attn.attn.{kind}_scale" for i in range(2) for kind in "kv"],
    "deepseek_v3": [f"model.layers.{i}.self_attn.attn_mqa.{kind}_scale" for i in range(2) for kind in "kv"],
}
# remapped names (Llama), the RadixAttention's own (Qwen2, DeepSeek), and the JSON where the model reads it
EXPECTED_PATHS = {"llama": ["remap", "json"], "qwen2": ["exact", "json"], "deepseek_v3": ["exact"]}


@pytest.mark.parametrize("arch", ["llama", "qwen2", "deepseek_v3"])
def test_scales_config_and_manifest(tmp_path, arch):
    result = calibrated(arch, tmp_path / "int4")

    artifact = tmp_path / "int4"
    before = result["previousDigest"]
    names = EXPECTED_NAMES[arch]
    scale_entries = {n: f for n, f in weight_map(artifact).items() if n.endswith(("k_scale", "v_scale"))}
    assert scale_entries == dict.fromkeys(names, SCALES_FILE)
    for layer in result["layers"]:
        k_name, v_name = names[2 * layer["layer"]], names[2 * layer["layer"] + 1]
        k, v = read_tensor(artifact, k_name), read_tensor(artifact, v_name)
        assert (k.dtype, tuple(k.shape)) == (torch.float32, (1,))
        assert k.item() > 0 and v.item() > 0
        assert k.item() == pytest.approx(layer["kAbsmax"] * SAFETY_MARGIN / FP8_E4M3_MAX, rel=1e-6)
        assert v.item() == pytest.approx(layer["vAbsmax"] * SAFETY_MARGIN / FP8_E4M3_MAX, rel=1e-6)
        if arch == "deepseek_v3":  # one latent row per token: K and V share the scale
            assert k.item() == v.item()

    config = json.loads((artifact / "config.json").read_text())
    assert config["quantization_config"]["kv_cache_scheme"] == KV_CACHE_SCHEME
    assert config["quantization_config"]["format"] == "pack-quantized"

    manifest = verify_artifact(artifact, result["digest"], content=True)
    assert manifest.digest != before
    assert SCALES_FILE in manifest.files
    assert (KV_SCALES_JSON in manifest.files) == ("json" in EXPECTED_PATHS[arch])
    assert result["kvScalePaths"] == EXPECTED_PATHS[arch]
    assert not (artifact / STAGING_DIR).exists()
    recorded = json.loads((artifact / "kvant-manifest.json").read_text())["kvCache"]
    assert (recorded["scales"], recorded["samples"], recorded["cache"]) == (
        "calibrate",
        result["samples"],
        "mla" if arch == "deepseek_v3" else "gqa",
    )


def test_recalibrating_is_deterministic_and_replaces_the_scales(tmp_path):
    first = calibrated("llama", tmp_path / "a")
    files_before = set(read_manifest(tmp_path / "a").files)

    again = calibrate(tmp_path / "a", CALIBRATION, lambda _: None)

    assert again["previousDigest"] == first["digest"]
    assert again["digest"] == first["digest"], "same data, same scales, same bytes"
    assert set(read_manifest(tmp_path / "a").files) == files_before
    assert list(weight_map(tmp_path / "a").values()).count(SCALES_FILE) == 4
