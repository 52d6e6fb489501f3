"""The bytes of SGLang 0.5.23's LoRA adapter pool on one GPU, from SGLang's own shape functions.

This is a test harness, not part of Kvant. It runs under SGLang's own Python environment (the
engine virtualenv), never under Kvant's:

    <engine python> tests/sglang_lora_pool.py < cases.json

stdin is a JSON list of cases ``{"config": {...}, "tp": N, "rank": R, "slots": S, "targets":
[...]}``, where config is a Llama config.json's fields. stdout is one JSON list with, per case,
``{"bytes": B}``: the sum over every normalized target and every layer of the A and B buffer
shapes that ``LoRAMemoryPool.get_lora_A_shape`` / ``get_lora_B_shape`` give, times the bytes of
the config's dtype, which is what ``LoRAMemoryPool.init_buffers`` allocates.

The pool object is made without its constructor (which needs a started model runner and its
process groups); the fields the shape functions read are set as the constructor would set them
for a dense model on a TP group of ``tp`` ranks without attention data parallelism
(attn_tp_size = moe_tp_size = tp). The base model is an empty module with the config: it has no
per-layer linears, so SGLang's shape functions take the config's dims and divide them by the TP
size, as they do for a model without a ``get_hidden_dim`` of its own (Llama).
"""

from __future__ import annotations

import json
import math
import sys

import torch
from sglang.srt.lora.mem_pool import LoRAMemoryPool
from sglang.srt.lora.utils import get_normalized_target_modules
from transformers import LlamaConfig

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class _EmptyModel(torch.nn.Module):
    """A base model with the config and no layers (see the module docstring)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config


def pool_bytes(case: dict) -> int:
    config = LlamaConfig(**case["config"])
    tp = int(case["tp"])
    pool = object.__new__(LoRAMemoryPool)
    pool.base_hf_config = config
    pool.num_layer = config.num_hidden_layers
    pool.max_loras_per_batch = int(case["slots"])
    pool.tp_size = pool.attn_tp_size = pool.moe_tp_size = tp
    pool.moe_ep_size = 1
    base = _EmptyModel(config)
    element = torch.tensor([], dtype=DTYPES[case["config"].get("torch_dtype", "bfloat16")]).element_size()
    total = 0
    for module in get_normalized_target_modules(case["targets"]):
        for layer in range(config.num_hidden_layers):
            a = pool.get_lora_A_shape(module, base, int(case["rank"]), layer)
            b = pool.get_lora_B_shape(module, base, int(case["rank"]), layer)
            total += (math.prod(a) + math.prod(b)) * element
    return total


def main() -> int:
    cases = json.loads(sys.stdin.read())
    json.dump([{"bytes": pool_bytes(case)} for case in cases], sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
