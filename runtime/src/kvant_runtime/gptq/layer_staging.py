"""GPTQ's resumable state, in the conversion's staging folder:

    OUTPUT/.kvant-partial/gptq/layer-00003.safetensors   layer 3's rounded tensors: `<module>.weight_packed`
                                                         (I32) and `<module>.weight_scale`, as the artifact
                                                         will hold them
    OUTPUT/.kvant-partial/gptq/hidden-00003.safetensors  the hidden states after layer 3, computed with its
                                                         rounded weights (the next layer's inputs)
    OUTPUT/.kvant-partial/gptq/state.json                {"layersDone": 4, ...}: written last, atomically

Every file is written under a temporary name, flushed and renamed, and `state.json` moves on only once
the layer's files are in place, so a kill at any point resumes at the first layer not done; the older
hidden states are removed after that. The propagated hidden states are stored exactly (float32), so a
resumed run computes the same bytes as an uninterrupted one. Publishing removes the whole folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from kvant_runtime.checkpoint.staging import write_json_atomic
from kvant_runtime.gptq.prerounded import layer_file

STATE_FILE = "state.json"


def _hidden_file(directory: Path, layer: int) -> Path:
    return directory / f"hidden-{layer:05d}.safetensors"


class LayerStaging:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)

    def state(self) -> dict[str, Any]:
        path = self.dir / STATE_FILE
        if not path.is_file():
            return {"layersDone": 0}
        state: dict[str, Any] = json.loads(path.read_text())
        return state

    def hidden(self, layer: int, device: torch.device) -> list[torch.Tensor]:
        """The hidden states after `layer`, one `[1, tokens, hidden]` tensor per sample."""
        tensors = load_file(_hidden_file(self.dir, layer), device=str(device))
        return [tensors[f"sample.{i}"] for i in range(len(tensors))]

    def save_layer(
        self,
        layer: int,
        rounded: dict[str, torch.Tensor],
        hidden: list[torch.Tensor] | None,
        state: dict[str, Any],
    ) -> None:
        """Stores layer `layer`'s tensors and (unless it is the last) its outputs, then advances state."""
        _save_atomic(rounded, layer_file(self.dir, layer))
        if hidden is not None:
            _save_atomic({f"sample.{i}": h for i, h in enumerate(hidden)}, _hidden_file(self.dir, layer))
        write_json_atomic(self.dir / STATE_FILE, {**state, "layersDone": layer + 1})
        for older in self.dir.glob("hidden-*.safetensors"):
            if older != _hidden_file(self.dir, layer):
                older.unlink()


def _save_atomic(tensors: dict[str, torch.Tensor], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_file({name: t.detach().cpu().contiguous() for name, t in tensors.items()}, tmp)
    with tmp.open("rb") as file:
        os.fsync(file.fileno())
    os.replace(tmp, path)
