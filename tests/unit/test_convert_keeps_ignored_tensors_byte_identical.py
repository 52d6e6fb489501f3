"""Tensors that are not quantized are copied byte for byte; defaults and --ignore decide which."""

import json

from safetensors import safe_open

from kvant_runtime.checkpoint.safetensors_io import ShardReader
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.convert_harness import convert, quantized_modules


def raw_tensors(directory) -> dict[str, bytes]:
    index = json.loads((directory / "model.safetensors.index.json").read_text())["weight_map"]
    out: dict[str, bytes] = {}
    for shard in sorted(set(index.values())):
        reader = ShardReader(directory / shard)
        out.update({name: bytes(reader.read_bytes(name)) for name in reader.tensors})
        reader.close()
    return out


def test_unquantized_tensors_are_byte_identical(tmp_path):
    source = tiny_checkpoint("llama")
    convert(source, tmp_path / "out", ignore=["re:.*self_attn\\.(q|k|v)_proj$", "down_proj"])
    before, after = raw_tensors(source), raw_tensors(tmp_path / "out")
    quantized = quantized_modules(tmp_path / "out")
    kept = {name for name in before if name.removesuffix(".weight") not in quantized}

    assert {"lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"} <= kept
    assert "model.layers.0.self_attn.k_proj.weight" in kept and "model.layers.1.mlp.down_proj.weight" in kept
    assert quantized == {
        f"model.layers.{i}.{m}" for i in (0, 1) for m in ("self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj")
    }
    for name in kept:
        assert after[name] == before[name], name
    with safe_open(tmp_path / "out" / "model-00001-of-00002.safetensors", "pt") as file:
        assert file.metadata() == {"format": "pt"}


def test_config_ignore_lists_every_unquantized_linear(tmp_path):
    convert(tiny_checkpoint("llama"), tmp_path / "out", ignore=["re:.*q_proj$"])
    ignore = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]["ignore"]
    assert ignore == ["lm_head", "model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj"]
