"""The layer-streamed K/V absmax equals what a full-model forward stores in transformers' own cache.

The reference loads the whole INT4 artifact with transformers (compressed-tensors decompresses it),
runs every calibration sample with a DynamicCache, and reads the cached tensors: post-RoPE K and V
for Llama and Qwen2 (whose q/k/v biases the stream must apply too), the latent (normalised
compressed KV, roped k_pe) for DeepSeek-V3. For MLA a forward hook on `kv_a_layernorm` checks the
compressed part independently of the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from kvant_runtime.calibrate.calibrator import CALIBRATION_DATA, measure_kv_absmax
from kvant_runtime.checkpoint.kv_layout import kv_layout
from kvant_runtime.checkpoint.layer_reader import read_json
from kvant_runtime.checkpoint.token_windows import token_windows
from tests.unit.calibrate_harness import CALIBRATION, int4_artifact


def full_model_absmax(
    artifact: Path, samples: list[torch.Tensor]
) -> tuple[list[float], list[float], list[float]]:
    model = AutoModelForCausalLM.from_pretrained(artifact, dtype=torch.float32)
    layers = model.config.num_hidden_layers
    k_max, v_max, latent_max = [0.0] * layers, [0.0] * layers, [0.0] * layers

    def on_norm(layer: int) -> Callable[..., None]:
        def hook(_module: object, _inputs: object, output: torch.Tensor) -> None:
            latent_max[layer] = max(latent_max[layer], output.abs().max().item())

        return hook

    for index, layer in enumerate(model.model.layers):
        if hasattr(layer.self_attn, "kv_a_layernorm"):
            layer.self_attn.kv_a_layernorm.register_forward_hook(on_norm(index))
    with torch.no_grad():
        for ids in samples:
            cache = DynamicCache(config=model.config)
            model(ids.unsqueeze(0), cache=cache, use_cache=True)
            for index in range(layers):
                stored: Any = cache.layers[index]  # a DynamicLayer: .keys, .values
                k_max[index] = max(k_max[index], stored.keys.abs().max().item())
                v_max[index] = max(v_max[index], stored.values.abs().max().item())
    return k_max, v_max, latent_max


@pytest.mark.parametrize("arch", ["llama", "qwen2", "deepseek_v3"])
def test_streamed_absmax_equals_full_model_cache(tmp_path, arch):
    artifact = int4_artifact(arch, tmp_path / "int4")
    config = read_json(artifact / "config.json")
    windows = token_windows(
        artifact,
        config["vocab_size"],
        None,
        CALIBRATION_DATA,
        samples=CALIBRATION.samples,
        sequence_length=CALIBRATION.sequence_length,
    )
    layout = kv_layout(config)

    streamed = measure_kv_absmax(artifact, windows, layout, torch.device("cpu"))
    k_full, v_full, latent_full = full_model_absmax(artifact, windows.samples)

    for layer in range(layout.layers):
        if layout.kind == "gqa":
            assert streamed.k(layer) == pytest.approx(k_full[layer], rel=1e-5)
            assert streamed.v(layer) == pytest.approx(v_full[layer], rel=1e-5)
        else:  # one latent row: its absmax over [compressed KV | k_pe], for K and V alike
            expected = max(k_full[layer], v_full[layer])
            assert streamed.k(layer) == streamed.v(layer) == pytest.approx(expected, rel=1e-5)
            assert latent_full[layer] <= expected
            assert latent_full[layer] == pytest.approx(k_full[layer], rel=1e-5)
    assert len({round(streamed.k(layer), 6) for layer in range(layout.layers)}) == layout.layers
