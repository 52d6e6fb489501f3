"""The KV-scale tensor names Kvant writes are the ones SGLang 0.5.23's loaders read, per architecture.

SGLang cannot be imported here (it is installed without its GPU dependencies), so the checks read its
source: the remapped names go through SGLang's own `maybe_remap_kv_scale_name`, compiled from its
file; the MLA names are checked against the RadixAttention prefix of DeepSeek's absorbed attention
and the DeepSeek loader's lookup, which only rewrites `k_proj`/`v_proj` to `attn_mqa`.
tests/unit/test_calibrate_paths_drive_sglang_loaders.py runs the loaders themselves.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import pytest

from kvant_kernels.kv_cache_scheme import KV_CACHE_SCHEME
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.kv_layout import kv_layout
from tests.unit.sglang_source import SGLANG, sglang_function


def radix_attention_prefix(relative: str, attribute: str) -> str:
    source = (SGLANG / relative).read_text()
    match = re.search(
        rf"self\.{attribute} = RadixAttention\((?:(?!\n        \)).)*?prefix=add_prefix\(\"(\w+)\", prefix\)",
        source,
        re.DOTALL,
    )
    assert match, f"{relative}: no RadixAttention assigned to self.{attribute}"
    return match.group(1)


@pytest.mark.parametrize(
    ("architecture", "model_file"),
    [("LlamaForCausalLM", "models/llama.py"), ("Qwen3ForCausalLM", "models/qwen3.py")],
)
def test_gqa_names_remap_to_the_radix_attention_scales(architecture, model_file):
    layout = kv_layout({"architectures": [architecture], "num_hidden_layers": 3})
    assert (layout.kind, layout.paths) == ("gqa", ("remap", "json"))
    remap = sglang_function("model_loader/weight_utils.py", "maybe_remap_kv_scale_name")
    assert "maybe_remap_kv_scale_name(name, params_dict)" in (SGLANG / model_file).read_text()
    attn = radix_attention_prefix(model_file, "attn")
    for layer in range(3):
        k_name, v_name = layout.scale_names(layer)
        assert (k_name, v_name) == (
            f"model.layers.{layer}.self_attn.k_scale",
            f"model.layers.{layer}.self_attn.v_scale",
        )
        params = {f"model.layers.{layer}.self_attn.{attn}.{kind}_scale" for kind in "kv"}
        assert {remap(k_name, params), remap(v_name, params)} == params


def test_mla_names_are_the_absorbed_attention_parameters():
    layout = kv_layout({"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 2})
    assert (layout.kind, layout.paths) == ("mla", ("exact",))
    assert radix_attention_prefix("models/deepseek_v2.py", "attn_mqa") == "attn_mqa"
    # The latent row SGLang caches is kv_lora_rank + qk_rope_head_dim wide, read by attn_mqa.
    assert "self.kv_lora_rank + self.qk_rope_head_dim," in (SGLANG / "models/deepseek_v2.py").read_text()
    loader = (SGLANG / "models/deepseek_common/deepseek_weight_loader.py").read_text()
    assert (
        'name = name.replace(\n                                            f"{scale[0]}_proj", "attn_mqa"'
        in loader
    )
    assert layout.scale_names(1) == (
        "model.layers.1.self_attn.attn_mqa.k_scale",
        "model.layers.1.self_attn.attn_mqa.v_scale",
    )


def test_compressed_tensors_scheme_is_one_sglang_loads_scales_for():
    source = (SGLANG / "layers/quantization/compressed_tensors/compressed_tensors.py").read_text()
    method = re.search(r"    def is_supported_scheme\(kv_cache_scheme.*?\n        \)\n", source, re.DOTALL)
    assert method, "SGLang's CompressedTensorsKVCacheMethod.is_supported_scheme not found"
    namespace: dict[str, Any] = {"Dict": dict, "Any": Any}
    exec(textwrap.dedent(method.group(0)), namespace)
    assert namespace["is_supported_scheme"](KV_CACHE_SCHEME) is True
    assert namespace["is_supported_scheme"]({**KV_CACHE_SCHEME, "dynamic": True}) is False


def test_unknown_architecture_is_refused_naming_it_and_sglang():
    with pytest.raises(CheckpointError, match=r"'NotAModel'.*SGLang 0\.5\.23 serves no architecture"):
        kv_layout({"architectures": ["NotAModel"], "num_hidden_layers": 2})
