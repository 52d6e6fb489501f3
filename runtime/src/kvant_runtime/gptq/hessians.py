"""Collects each target's Hessian H = 2/n sum(x x^T) over the calibration inputs of one decoder layer.

Hooks watch the layer while the samples run through it with its unquantized weights:
- a forward hook on each targeted `nn.Linear` adds the rows of its input;
- a forward pre-hook on each fused experts module sees the hidden states and the router's choice
  (`top_k_index [tokens, k]`) before the experts run, and adds for expert e only the tokens routed to it:
  those rows feed its gate and up projections, and act(gate(x)) * up(x) feeds its down projection
  (computed here with the expert's weights, as transformers' eager experts loop does).

Sums are float32 `[in, in]` on the compute device, one per distinct input (an expert's gate and up share
one); memory per layer is the sum of in^2 x 4 bytes over those inputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from kvant_runtime.gptq.layer_targets import ExpertGroup, Target


class InputSum:
    """sum(x x^T) and the number of rows x it holds."""

    def __init__(self) -> None:
        self.sum: torch.Tensor | None = None
        self.tokens = 0

    def add(self, inputs: torch.Tensor) -> None:
        rows = inputs.detach().reshape(-1, inputs.shape[-1]).float()
        if rows.shape[0] == 0:
            return
        if self.sum is None:
            self.sum = torch.zeros(rows.shape[1], rows.shape[1], dtype=torch.float32, device=rows.device)
        self.sum.addmm_(rows.T, rows)
        self.tokens += rows.shape[0]

    def hessian(self) -> torch.Tensor:
        assert self.sum is not None and self.tokens > 0, "no inputs were seen"
        return self.sum * (2.0 / self.tokens)


@contextmanager
def collecting(
    layer: torch.nn.Module, layer_name: str, targets: list[Target], groups: list[ExpertGroup]
) -> Iterator[dict[str, InputSum]]:
    """Input sums by Hessian key, filled while the caller runs the samples through `layer`."""
    sums = {target.hessian: InputSum() for target in targets}
    handles: list[torch.utils.hooks.RemovableHandle] = []
    for relative, module in layer.named_modules():
        name = f"{layer_name}.{relative}" if relative else layer_name
        if isinstance(module, torch.nn.Linear) and name in sums:
            handles.append(module.register_forward_hook(_linear_hook(sums[name])))
    for group in groups:
        handles.append(group.module.register_forward_pre_hook(_experts_hook(group, sums), with_kwargs=True))
    try:
        yield sums
    finally:
        for handle in handles:
            handle.remove()


def _linear_hook(into: InputSum) -> Any:
    def hook(_module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], _output: Any) -> None:
        into.add(inputs[0])

    return hook


def _experts_hook(group: ExpertGroup, sums: dict[str, InputSum]) -> Any:
    def hook(_module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        hidden = args[0] if args else kwargs["hidden_states"]
        chosen = args[1] if len(args) > 1 else kwargs["top_k_index"]
        rows = hidden.reshape(-1, hidden.shape[-1]).float()
        chosen = chosen.reshape(rows.shape[0], -1)
        with torch.no_grad():
            for expert in range(group.count):
                into, down = sums.get(group.input_key(expert)), sums.get(group.down_key(expert))
                if into is None and down is None:
                    continue
                routed = rows[(chosen == expert).any(dim=-1)]
                if into is not None:
                    into.add(routed)
                if down is not None and routed.shape[0]:
                    gate_up = torch.nn.functional.linear(routed, group.parameter("gate_up_proj")[expert])
                    gate, up = gate_up.chunk(2, dim=-1)
                    down.add(group.activation(gate) * up)

    return hook
