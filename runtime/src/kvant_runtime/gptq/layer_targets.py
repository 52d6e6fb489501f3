"""The Linear weights of one decoder layer that a conversion quantizes, as GPTQ sees them.

transformers holds a dense Linear as an `nn.Linear` and MoE routed experts fused into 3-D parameters
(`experts.gate_up_proj [E, 2I, H]`, gate rows above up rows; `experts.down_proj [E, H, I]`, the layout
`checkpoint.layer_reader` stacks). The checkpoint, the converter and the artifact name each Linear on its
own (`...experts.<e>.gate_proj.weight`), so a target pairs that checkpoint name with a view into the
module's parameter, to read the weight and to write the rounded one back. `hessian` names the input it
shares with other targets (an expert's gate and up read the same tokens), which `hessians` collects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch

from kvant_contracts.int4_artifact import TargetRule, is_routed_expert
from kvant_runtime.checkpoint.errors import CheckpointError


@dataclass(frozen=True)
class Target:
    name: str  # checkpoint tensor name, `<module>.weight`
    hessian: str  # key of the inputs it is computed on
    view: Callable[[], torch.Tensor]  # the live float32 `[out, in]` weight inside the module
    expert: bool = False

    def read(self) -> torch.Tensor:
        return self.view().detach().clone()

    def write(self, weight: torch.Tensor) -> None:
        with torch.no_grad():
            self.view().copy_(weight)


@dataclass(frozen=True)
class ExpertGroup:
    """A fused experts module and its name; its inputs are collected per expert (see `hessians`)."""

    name: str
    module: torch.nn.Module

    @property
    def count(self) -> int:
        return int(self.parameter("gate_up_proj").shape[0])

    def parameter(self, attribute: str) -> torch.Tensor:
        """The live fused parameter (`gate_up_proj` or `down_proj`)."""
        value = getattr(self.module, attribute)
        assert isinstance(value, torch.Tensor), f"{self.name}.{attribute} is not a tensor"
        return value.data

    def activation(self, gate: torch.Tensor) -> torch.Tensor:
        """The experts' activation (`act_fn`) on gate outputs."""
        act = cast(Callable[[torch.Tensor], torch.Tensor], self.module.act_fn)
        return act(gate)

    def input_key(self, expert: int) -> str:
        return f"{self.name}.{expert}.input"

    def down_key(self, expert: int) -> str:
        return f"{self.name}.{expert}.down_proj.input"


def layer_targets(
    layer: torch.nn.Module, layer_name: str, rule: TargetRule, stored: set[str]
) -> tuple[list[Target], list[ExpertGroup]]:
    """The quantized Linears of `layer` (named `layer_name` in the model) whose weights the checkpoint
    stores under `stored` names, and the fused experts modules among them."""
    targets: list[Target] = []
    groups: list[ExpertGroup] = []
    for relative, module in layer.named_modules():
        name = f"{layer_name}.{relative}" if relative else layer_name
        if isinstance(module, torch.nn.Linear):
            weight_name = f"{name}.weight"
            if weight_name in stored and rule.quantizes(weight_name, tuple(module.weight.shape)):
                # An expert kept as its own Linear (called on its tokens only) is an expert all the same.
                expert = is_routed_expert(weight_name)
                targets.append(Target(weight_name, name, _parameter_view(module, "weight"), expert))
        elif _is_fused_experts(module):
            group = ExpertGroup(name, module)
            found = _expert_targets(group, rule, stored)
            if found:
                _check_supported_experts(group)
                targets += found
                groups.append(group)
    return targets, groups


def _is_fused_experts(module: torch.nn.Module) -> bool:
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    if not (isinstance(gate_up, torch.nn.Parameter) and isinstance(down, torch.nn.Parameter)):
        return False
    return gate_up.ndim == 3


def _check_supported_experts(group: ExpertGroup) -> None:
    module = group.module
    layout = (getattr(module, "is_transposed", False), getattr(module, "is_concatenated", True))
    if layout != (False, True) or getattr(module, "has_bias", False) or not hasattr(module, "act_fn"):
        raise CheckpointError(
            f"{group.name}: GPTQ supports fused MoE experts stored as gate_up_proj [E, 2I, H] (gate rows "
            f"above up rows) and down_proj [E, H, I] without bias; {type(module).__name__} differs. "
            "Use --method rtn, or --targets all-linear with --ignore for the experts"
        )


def _expert_targets(group: ExpertGroup, rule: TargetRule, stored: set[str]) -> list[Target]:
    half, inner = group.parameter("gate_up_proj").shape[1] // 2, group.parameter("down_proj").shape[1]
    targets: list[Target] = []
    for e in range(group.count):
        views = {
            "gate_proj": (_slice_view(group, "gate_up_proj", e, 0, half), group.input_key(e)),
            "up_proj": (_slice_view(group, "gate_up_proj", e, half, 2 * half), group.input_key(e)),
            "down_proj": (_slice_view(group, "down_proj", e, 0, inner), group.down_key(e)),
        }
        for projection, (view, key) in views.items():
            weight_name = f"{group.name}.{e}.{projection}.weight"
            if weight_name in stored and rule.quantizes(weight_name, tuple(view().shape)):
                targets.append(Target(weight_name, key, view, expert=True))
    return targets


def _parameter_view(module: torch.nn.Module, attribute: str) -> Callable[[], torch.Tensor]:
    # Looked up on each call: the stream reassigns parameters whenever it loads a layer.
    def view() -> torch.Tensor:
        value = getattr(module, attribute)
        assert isinstance(value, torch.Tensor)
        return value.data

    return view


def _slice_view(
    group: ExpertGroup, attribute: str, expert: int, low: int, high: int
) -> Callable[[], torch.Tensor]:
    return lambda: group.parameter(attribute)[expert, low:high]
