"""`kvant tiny-model` writes a sharded checkpoint with a tokenizer; FP8-block is DeepSeek's layout."""

import json

import torch
from safetensors import safe_open
from transformers import AutoTokenizer

from kvant_cli.main import main


def test_deepseek_fp8_block_checkpoint(tmp_path):
    assert main(["tiny-model", str(tmp_path / "m"), "--arch", "deepseek_v3", "--dtype", "fp8-block"]) == 0
    index = json.loads((tmp_path / "m" / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(index.values())) == 2
    assert json.loads((tmp_path / "m" / "config.json").read_text())["quantization_config"][
        "weight_block_size"
    ] == [128, 128]
    name = "model.layers.0.self_attn.kv_a_proj_with_mqa.weight"
    with safe_open(tmp_path / "m" / index[name], "pt") as file:
        assert file.get_tensor(name).dtype == torch.float8_e4m3fn
    with safe_open(tmp_path / "m" / index[name + "_scale_inv"], "pt") as file:
        assert file.get_tensor(name + "_scale_inv").shape == (2, 1)  # 144 rows: a cropped edge block
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "m")
    assert tokenizer.decode(tokenizer("hi there")["input_ids"]) == "hi there"


def test_qwen2_checkpoint_has_random_qkv_biases_across_shards(tmp_path):
    assert main(["tiny-model", str(tmp_path / "m"), "--arch", "qwen2", "--shards", "3"]) == 0
    index = json.loads((tmp_path / "m" / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(index.values())) == 3
    assert json.loads((tmp_path / "m" / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    biases = sorted(name for name in index if name.endswith(".bias"))
    assert biases == [f"model.layers.{i}.self_attn.{p}_proj.bias" for i in range(2) for p in "kqv"]
    for name in biases:
        with safe_open(tmp_path / "m" / index[name], "pt") as file:
            assert file.get_tensor(name).abs().max() > 0, (
                "transformers starts biases at zero; the generator does not"
            )
