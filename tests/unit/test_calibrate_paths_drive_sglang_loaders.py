"""What `kvant calibrate` writes is taken by SGLang 0.5.23's own code, run on CPU (tests/unit/sglang_source.py
compiles it from SGLang's source):
- exact path: a converted Qwen2 checkpoint (three shards, q/k/v biases) calibrates; its scale tensors
  carry the names of the parameters SGLang's KV-cache quant method registers, and Qwen2's loader
  loads every one;
- json path: SGLang's `kv_cache_scales_loader` with `QuantParamSchema` reads the calibrated
  `kvant-kv-scales.json` for each TP rank;
- remap path: `maybe_remap_kv_scale_name` and Llama's loader put the remapped names into the
  RadixAttention's parameters (and drop exact names, so Kvant writes only the remapped ones);
- an architecture no path serves is refused, naming it and the SGLang version.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kvant_contracts.artifact_manifest import verify_artifact
from kvant_contracts.kv_scale_paths import KV_SCALE_PATHS
from kvant_runtime.calibrate.calibrator import Options, calibrate
from kvant_runtime.calibrate.scales_publish import SCALES_FILE
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.kv_layout import REMAPPED_ATTENTION, kv_layout
from kvant_runtime.launch.argv import KV_SCALES_JSON
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.calibrate_harness import CALIBRATION, calibrated, read_tensor, weight_map
from tests.unit.convert_harness import convert
from tests.unit.sglang_source import (
    WEIGHT_UTILS,
    attribute_holding,
    model_with_kv_scales,
    quant_param_loader,
    radix_attribute,
    sglang_function,
    sglang_method,
    weight_loading_namespace,
)

LAYERS = 2  # the tiny models'


def scale_tensors(artifact: Path) -> dict[str, torch.Tensor]:
    return {
        name: read_tensor(artifact, name)
        for name, file in weight_map(artifact).items()
        if file == SCALES_FILE
    }


def loaded(model: torch.nn.Module) -> dict[str, float]:
    return {name: parameter.item() for name, parameter in model.named_parameters()}


@pytest.fixture(scope="module")
def qwen2_artifact(tmp_path_factory) -> tuple[Path, dict]:
    source = tiny_checkpoint("qwen2", shards=3)
    assert len(set(weight_map(source).values())) == 3
    assert {"model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.k_proj.bias"} <= set(
        weight_map(source)
    )
    artifact = tmp_path_factory.mktemp("qwen2") / "int4"
    convert(source, artifact, group_size=32)
    options = Options(CALIBRATION.samples, CALIBRATION.sequence_length, tensor_parallel=2)
    return artifact, calibrate(artifact, options, lambda _: None)


def test_qwen2_scales_load_through_qwen2s_loader(qwen2_artifact):
    artifact, result = qwen2_artifact
    assert result["kvScalePaths"] == ["exact", "json"]
    tensors = scale_tensors(artifact)
    assert set(tensors) == {
        f"model.layers.{i}.self_attn.attn.{kind}_scale" for i in range(LAYERS) for kind in "kv"
    }

    model = model_with_kv_scales(LAYERS, "self_attn.attn")  # what SGLang builds for this artifact
    assert {name for name, _ in model.named_parameters()} == set(tensors)
    load = sglang_method(
        "models/qwen2.py", "Qwen2ForCausalLM", "_legacy_load_weights", **weight_loading_namespace()
    )
    load(model, list(tensors.items()))
    assert loaded(model) == {name: tensor.item() for name, tensor in tensors.items()}
    assert all(value > 0 for value in loaded(model).values())


def test_qwen2_json_is_read_by_sglangs_quant_param_schema(qwen2_artifact):
    artifact, result = qwen2_artifact
    path = artifact / KV_SCALES_JSON
    assert KV_SCALES_JSON in verify_artifact(artifact, result["digest"], content=True).files
    assert result["tensorParallel"] == 2
    loader = quant_param_loader()
    expected = [(row["layer"], max(row["kScale"], row["vScale"])) for row in result["layers"]]
    for rank in range(2):
        assert list(loader(str(path), rank, 2, LAYERS, "qwen2")) == expected
    # SGLang checks the file against its own TP size and model type, falling back to 1.0 silently:
    assert list(loader(str(path), 0, 1, LAYERS, "qwen2")) == []
    assert list(loader(str(path), 0, 2, LAYERS, "llama")) == []
    assert (
        json.loads(path.read_text())["model_type"]
        == json.loads((artifact / "config.json").read_text())["model_type"]
    )


@pytest.mark.parametrize(
    ("architecture", "model_file", "layer_class", "attention_class", "radix"),
    [
        ("Qwen2ForCausalLM", "qwen2.py", "Qwen2DecoderLayer", "Qwen2Attention", "attn"),
        ("Qwen2MoeForCausalLM", "qwen2_moe.py", "Qwen2MoeDecoderLayer", "Qwen2MoeAttention", "attn"),
        ("Qwen3MoeForCausalLM", "qwen3_moe.py", "Qwen3MoeDecoderLayer", "Qwen3MoeAttention", "attn"),
        ("Glm4MoeForCausalLM", "glm4_moe.py", "Glm4MoeDecoderLayer", "Glm4MoeAttention", "attn"),
        ("MixtralForCausalLM", "mixtral.py", "MixtralDecoderLayer", "MixtralAttention", "attn"),
        (
            "DeepseekV3ForCausalLM",
            "deepseek_v2.py",
            "DeepseekV2DecoderLayer",
            "DeepseekV2AttentionMLA",
            "attn_mqa",
        ),
    ],
)
def test_exact_names_are_the_kv_cache_methods_parameters(
    architecture, model_file, layer_class, attention_class, radix
):
    holder = attribute_holding(f"models/{model_file}", layer_class, attention_class)
    assert radix in radix_attribute(f"models/{model_file}", attention_class)
    registered = {name for name, _ in model_with_kv_scales(LAYERS, f"{holder}.{radix}").named_parameters()}
    layout = kv_layout({"architectures": [architecture], "num_hidden_layers": LAYERS})
    assert layout.paths[0] == "exact"
    assert set(layout.all_scale_names()) == registered


def test_remapped_names_reach_the_radix_attention_and_llamas_loader_takes_only_them(tmp_path):
    result = calibrated("llama", tmp_path / "int4")
    assert result["kvScalePaths"] == ["remap", "json"]
    tensors = scale_tensors(tmp_path / "int4")
    assert set(tensors) == {
        f"model.layers.{i}.self_attn.{kind}_scale" for i in range(LAYERS) for kind in "kv"
    }

    model = model_with_kv_scales(LAYERS, REMAPPED_ATTENTION)
    load = sglang_method(
        "models/llama.py", "LlamaForCausalLM", "_legacy_load_weights", **weight_loading_namespace()
    )
    exact = {name.replace(".self_attn.", ".self_attn.attn."): tensor for name, tensor in tensors.items()}
    load(model, list(exact.items()))
    assert set(loaded(model).values()) == {-1.0}, "a remapping loader drops exact names"
    load(model, list(tensors.items()))
    assert loaded(model) == {name: tensor.item() for name, tensor in exact.items()}


def test_every_remap_architecture_kvant_accepts_maps_onto_its_radix_attention():
    remap = sglang_function(WEIGHT_UTILS, "maybe_remap_kv_scale_name")
    accepted = []
    for architecture, entry in KV_SCALE_PATHS.items():
        if entry.remap and entry.cache in ("gqa", "mla") and entry.attention == REMAPPED_ATTENTION:
            layout = kv_layout({"architectures": [architecture], "num_hidden_layers": LAYERS})
            parameters = {
                f"model.layers.{i}.{entry.attention}.{kind}_scale" for i in range(LAYERS) for kind in "kv"
            }
            assert {remap(name, parameters) for name in layout.all_scale_names()} == parameters
            accepted.append(architecture)
    assert {"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM", "Gemma3ForCausalLM"} <= set(
        accepted
    )


@pytest.mark.parametrize(
    ("architecture", "why"),
    [
        ("Qwen3NextForCausalLM", "linear-attention"),  # hybrid: Gated DeltaNet layers
        ("MambaForCausalLM", "not a RadixAttention"),
        ("DbrxForCausalLM", "a path the table does not derive"),  # remaps; layers at transformer.blocks
        ("NoSuchModelForCausalLM", "serves no architecture of that name"),
    ],
)
def test_an_architecture_without_a_path_is_refused_naming_it_and_sglang(architecture, why):
    with pytest.raises(
        CheckpointError, match=rf"{architecture}.*SGLang 0\.5\.23|SGLang 0\.5\.23.*{architecture}"
    ) as error:
        kv_layout({"architectures": [architecture], "num_hidden_layers": LAYERS})
    assert why in str(error.value)
