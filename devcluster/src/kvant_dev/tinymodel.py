"""Tiny checkpoints with random weights, generated from transformers configs (nothing is downloaded).

Tests, the demo and the end-to-end scenarios convert, calibrate and serve these instead of real
models. Three architectures cover the shapes that matter: a Llama-style GQA model, a Qwen2 GQA model
(biases on q/k/v, which SGLang loads by exact parameter name) and a DeepSeek-V3-style MLA + MoE
model, in bf16, fp16, fp32 (the same values, cast) or FP8-block (DeepSeek's own layout: e4m3 weights
with a float32 `weight_scale_inv` per 128 x 128 block).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

from kvant_contracts.safetensors_header import INDEX_FILE
from kvant_dev.tinymodel_options import ARCHES, DTYPES, Arch, Dtype
from kvant_kernels.fp8_block import BLOCK
from kvant_kernels.tensors import quantize_fp8_block

# Dense dtypes other than bf16: the same bf16-initialised weights, cast (so every dtype has equal values).
_CAST: dict[str, torch.dtype] = {"fp16": torch.float16, "fp32": torch.float32}

# Every Linear input dimension is a multiple of 128, so all INT4 group sizes apply; kv_a_proj_with_mqa
# has 144 outputs, so FP8-block sources get a cropped edge block.
_GQA: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}
_CONFIGS: dict[str, dict[str, Any]] = {
    "llama": _GQA,
    "qwen2": _GQA,
    "deepseek_v3": {
        "hidden_size": 128,
        "intermediate_size": 256,
        "moe_intermediate_size": 128,
        "num_hidden_layers": 2,
        "first_k_dense_replace": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "q_lora_rank": 128,
        "kv_lora_rank": 128,
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 32,
        "v_head_dim": 32,
        "max_position_embeddings": 512,
        "tie_word_embeddings": False,
    },
}
# Byte-level tokenizer: 256 byte tokens plus these specials, so any text tokenizes.
_SPECIAL_TOKENS = ("<s>", "</s>", "<pad>")
VOCAB_SIZE = 256 + len(_SPECIAL_TOKENS)
# In DeepSeek's FP8 checkpoints only the decoder-layer projections are FP8; these stay bf16.
_FP8_KEEP = re.compile(r"(embed_tokens|lm_head|norm|layernorm|mlp\.gate)\.weight$")


def make_tiny_checkpoint(
    path: str | Path,
    arch: Arch = "llama",
    dtype: Dtype = "bf16",
    shards: int = 2,
    seed: int = 0,
    **config_overrides: Any,
) -> Path:
    """Writes a checkpoint directory (config, safetensors shards + index, tokenizer) and returns it.

    The same arguments always give the same bytes. `config_overrides` change the transformers config,
    e.g. `hidden_size=2048, num_hidden_layers=16` for a benchmark-sized model.
    """
    if arch not in ARCHES:
        raise ValueError(f"unknown arch {arch!r}; valid: {', '.join(ARCHES)}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    config = AutoConfig.for_model(arch, vocab_size=VOCAB_SIZE, **{**_CONFIGS[arch], **config_overrides})
    config.bos_token_id, config.eos_token_id, config.pad_token_id = 256, 257, 258
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)  # type: ignore[no-untyped-call]
    _randomize_biases(model)
    if dtype in _CAST:
        model = model.to(_CAST[dtype])
    # transformers writes the checkpoint names (per-expert MoE weights); the re-split gives exact shards.
    model.save_pretrained(out, max_shard_size=2**62)
    _split_into_shards(out, shards, fp8_block=dtype == "fp8-block")
    if dtype == "fp8-block":
        _declare_fp8_block(out)
    generation = GenerationConfig(bos_token_id=256, eos_token_id=257, pad_token_id=258)  # type: ignore[no-untyped-call]
    generation.save_pretrained(out)
    _write_tokenizer(out)
    return out


def _randomize_biases(model: torch.nn.Module) -> None:
    """Gives every bias (Qwen2's q/k/v) random values: transformers starts them at zero, which would
    hide a bias that a converter or a calibrator drops."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(".bias"):
                parameter.normal_(0.0, 0.5)


def _split_into_shards(directory: Path, shards: int, fp8_block: bool) -> None:
    """Replaces model.safetensors by `shards` files of about equal size and their index."""
    single = directory / "model.safetensors"
    tensors = load_file(single)
    if fp8_block:
        for name in [n for n, t in tensors.items() if t.ndim == 2 and not _FP8_KEEP.search(n)]:
            tensors[name], tensors[f"{name}_scale_inv"] = quantize_fp8_block(tensors[name])
    names = sorted(tensors)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    groups: list[list[str]] = [[] for _ in range(shards)]
    written = 0
    for name in names:
        groups[min(shards - 1, written * shards // total)].append(name)
        written += tensors[name].numel() * tensors[name].element_size()
    groups = [g for g in groups if g] or [[]]
    weight_map: dict[str, str] = {}
    for number, group in enumerate(groups, start=1):
        file = f"model-{number:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: tensors[n] for n in group}, directory / file, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(group, file))
    single.unlink()
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")


def _declare_fp8_block(directory: Path) -> None:
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    config["quantization_config"] = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": list(BLOCK),
    }
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def _write_tokenizer(directory: Path) -> None:
    vocab = {chr(b): b for b in range(256)}
    vocab.update({token: 256 + i for i, token in enumerate(_SPECIAL_TOKENS)})
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<pad>"
    )
    tokenizer.save_pretrained(directory)
