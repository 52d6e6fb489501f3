"""Layer-streamed execution: a model run one decoder layer at a time, with transformers' own modules.

The model is built on the meta device from config.json, so it holds no weights. The embedding runs
first; then each decoder layer gets its weights from the checkpoint (dequantized, see `checkpoint`),
runs every sample, and gives its memory back; only the hidden states are kept between layers.
Memory is one layer plus the activations, so a 1T-parameter MoE calibrates on one GPU node.

Each layer is called the way the transformers model calls it (same rotary embedding, same causal
mask, same attention implementation), so the result equals a full-model forward.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.masking_utils import create_causal_mask

from kvant_runtime.checkpoint import DEVICES
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.kv_tap import KVTap
from kvant_runtime.checkpoint.layer_reader import Checkpoint


def compute_dtype(device: torch.device) -> torch.dtype:
    """float32 on CPU (bf16 matmuls there are slow and lossy), bfloat16 on GPU (memory)."""
    return torch.float32 if device.type == "cpu" else torch.bfloat16


class LayerStream:
    """One model directory, run layer by layer on `device`."""

    def __init__(self, directory: Path, device: torch.device, dtype: torch.dtype | None = None) -> None:
        self.checkpoint = Checkpoint(directory)
        self.device = device
        self.dtype = dtype or compute_dtype(device)
        self.model = _skeleton(directory, self.dtype)
        self.config = self.model.config
        decoder = self.model.get_decoder()
        self.layers: list[torch.nn.Module] = list(decoder.layers)
        self._names = {id(module): name for name, module in self.model.named_modules()}
        self._rotary = type(decoder.rotary_emb)(config=self.config).to(device)
        self._norm = decoder.norm

    def close(self) -> None:
        self.checkpoint.close()

    @torch.no_grad()
    def embed(self, samples: list[torch.Tensor]) -> list[torch.Tensor]:
        with self._loaded(self.model.get_input_embeddings()) as embedding:
            return [embedding(ids.to(self.device).unsqueeze(0)) for ids in samples]

    @contextmanager
    def layer(self, index: int) -> Iterator[torch.nn.Module]:
        with self._loaded(self.layers[index]) as module:
            yield module

    @torch.no_grad()
    def run_layer(
        self, module: torch.nn.Module, hidden: list[torch.Tensor], tap: KVTap | None
    ) -> list[torch.Tensor]:
        return [self._run_one(module, states, tap) for states in hidden]

    @torch.no_grad()
    def logits(self, hidden: list[torch.Tensor]) -> Iterator[torch.Tensor]:
        """Next-token logits `[tokens, vocab]` (float32) per sample, one sample at a time."""
        head = self.model.get_output_embeddings()
        with self._loaded(self._norm) as norm, self._loaded(head, tied=self._tied_head()) as lm_head:
            for states in hidden:
                yield lm_head(norm(states))[0].float()

    def run(
        self, samples: list[torch.Tensor], tap: KVTap | None, on_layer: Callable[[int], object] | None = None
    ) -> list[torch.Tensor]:
        """Embedding and every decoder layer; returns the last hidden states (before the final norm)."""
        hidden = self.embed(samples)
        for index in range(len(self.layers)):
            with self.layer(index) as module:
                hidden = self.run_layer(module, hidden, tap)
            if on_layer is not None:
                on_layer(index)
        return hidden

    def _run_one(self, module: torch.nn.Module, states: torch.Tensor, tap: KVTap | None) -> torch.Tensor:
        positions = torch.arange(states.shape[1], device=self.device).unsqueeze(0)
        mask = create_causal_mask(
            config=self.config, inputs_embeds=states, attention_mask=None, cache=None, position_ids=positions
        )
        out = module(
            states,
            attention_mask=mask,
            position_ids=positions,
            cache=tap,
            use_cache=tap is not None,
            position_embeddings=self._rotary(states, positions),
        )
        hidden: torch.Tensor = out[0] if isinstance(out, tuple) else out
        return hidden

    def _tied_head(self) -> torch.nn.Module | None:
        head_name = self._names[id(self.model.get_output_embeddings())]
        if self.checkpoint.has(f"{head_name}.weight") or not self.config.tie_word_embeddings:
            return None
        embedding: torch.nn.Module = self.model.get_input_embeddings()
        return embedding

    @contextmanager
    def _loaded(
        self, module: torch.nn.Module, tied: torch.nn.Module | None = None
    ) -> Iterator[torch.nn.Module]:
        """`module` with its checkpoint weights on the device; back on the meta device afterwards."""
        source = tied if tied is not None else module
        expected = source.state_dict()
        tensors = self.checkpoint.module_tensors(self._names[id(source)], expected)
        module.load_state_dict(tensors, strict=True, assign=True)
        module.to(self.device)
        try:
            yield module
        finally:
            module.to_empty(device="meta")


def _skeleton(directory: Path, dtype: torch.dtype) -> Any:
    try:
        config = AutoConfig.from_pretrained(directory)
    except (OSError, ValueError, KeyError) as err:
        raise CheckpointError(f"{directory}/config.json: transformers cannot read it: {err}") from err
    # The weights are dequantized on loading, so the modules are plain ones whatever the checkpoint holds.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=dtype)  # type: ignore[no-untyped-call]


def resolve_device(name: str) -> torch.device:
    """The torch device `--device name` asks for, or CheckpointError naming the valid ones or saying
    that no CUDA device is visible."""
    if name not in DEVICES:
        raise CheckpointError(f"--device {name!r}: valid values are {', '.join(DEVICES)}")
    if name == "cuda" and not torch.cuda.is_available():
        raise CheckpointError("--device cuda: no CUDA device is visible to this process")
    return torch.device(name)
