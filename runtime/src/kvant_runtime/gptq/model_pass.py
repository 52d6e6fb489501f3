"""GPTQ over a whole checkpoint, one decoder layer at a time, resumable layer by layer.

For each decoder layer, with transformers' own modules (`checkpoint.layer_stream.LayerStream`, in float32):
1. the calibration samples run through the layer with its source weights while hooks sum each target's
   inputs (`hessians`); every target's Hessian thus sees the layer's inputs as produced by the
   already-rounded layers before it;
2. every target weight is rounded (`gptq_solver`), then written back into the layer dequantized;
3. the samples run through the layer again ("sequential propagation"): those outputs, which carry this
   layer's rounding error, are the next layer's inputs.
The layer's rounded tensors and outputs are then staged (`layer_staging`), so a rerun resumes there.

RTN instead of GPTQ, counted and reported:
- a routed expert that saw fewer than `GptqSettings.expert_threshold` tokens (default 2 x group size:
  below that a group's G x G block of H is estimated from under two tokens per column, and GPTQ fits
  those few tokens rather than the distribution); an expert is judged by the inputs of each projection;
- a target that saw no input at all (a Linear the forward pass never called).
Target weights outside the decoder layers (none in the supported architectures) are rounded with RTN
by the shard converter, which reports how many.

Memory: one decoder layer in float32, the input sums of its targets (see `hessians`), one float64
Hessian during its solve, and the hidden states (samples x sequence length x hidden x 4 bytes, twice
while a layer runs).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

import torch

from kvant_contracts.int4_artifact import TargetRule, TensorSpec, module_of, quantized_outputs
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.layer_stream import LayerStream, resolve_device
from kvant_runtime.checkpoint.token_windows import token_windows
from kvant_runtime.gptq.gptq_settings import GptqSettings
from kvant_runtime.gptq.gptq_solver import NotPositiveDefinite, gptq_round
from kvant_runtime.gptq.hessians import InputSum, collecting
from kvant_runtime.gptq.int4_rounding import Rounded, Rounding, round_to_nearest
from kvant_runtime.gptq.layer_staging import LayerStaging
from kvant_runtime.gptq.layer_targets import Target, layer_targets
from kvant_runtime.job_progress import Progress

CALIBRATION_DATA = "kvant_runtime.calibrate"
_COUNTS = ("gptq", "rtnExperts", "rtnUnseen")


class RoundingRecipe(Protocol):
    """What GPTQ reads of the converter's recipe (`kvant_runtime.convert.recipe.Recipe`), stated here so
    that gptq, which convert calls, imports nothing of convert."""

    @property
    def rule(self) -> TargetRule: ...
    @property
    def group_size(self) -> int: ...
    @property
    def gptq(self) -> GptqSettings | None: ...


def quantize_layers(
    source_dir: Path,
    recipe: RoundingRecipe,
    stored: dict[str, str],
    directory: Path,
    *,
    progress: Progress,
    stop_after_layers: int | None = None,
) -> bool:
    """Rounds every target weight of every decoder layer into `directory`; `stored` holds the weights
    the converter quantizes, with their source dtype. Returns False when it stopped early
    (`stop_after_layers`, for tests)."""
    settings = recipe.gptq
    assert settings is not None, "GPTQ settings are set for method gptq"
    staging = LayerStaging(directory)
    state = staging.state()
    try:
        stream = LayerStream(source_dir, resolve_device(settings.device), torch.float32)
    except CheckpointError as err:
        raise CheckpointError(f"GPTQ: {err}") from err
    try:
        layers = len(stream.layers)
        first = int(state["layersDone"])
        if first >= layers:
            return True
        hidden = staging.hidden(first - 1, stream.device) if first else _inputs(stream, source_dir, settings)
        tokens = sum(h.shape[1] for h in hidden)
        progress.note(
            f"GPTQ: {layers} decoder layers, {len(hidden)} samples ({tokens} tokens), damp {settings.damp}, "
            f"act-order {'on' if settings.act_order else 'off'}, device {settings.device}"
            + (f"; resuming at layer {first + 1} ({first} done)" if first else "")
        )
        if not first and tokens < settings.samples * settings.sequence_length:
            text = "--data" if settings.data is not None else "the built-in calibration text"
            asked = f"{settings.samples} x {settings.sequence_length}"
            progress.note(f"GPTQ: {text} gives {tokens} of the {asked} tokens asked for")
        for index in range(first, layers):
            started = time.monotonic()
            hidden, staged, counts = _layer(stream, index, hidden, recipe, stored)
            state = {key: int(state.get(key, 0)) + counts.get(key, 0) for key in _COUNTS}
            staging.save_layer(index, staged, hidden if index + 1 < layers else None, state)
            progress.note(_layer_line(index, layers, counts, recipe, time.monotonic() - started))
            stopped = stop_after_layers is not None and index + 1 - first >= stop_after_layers
            if stopped and index + 1 < layers:
                return False
        progress.note(
            f"GPTQ done: {state['gptq']} weights by GPTQ, {state['rtnExperts']} experts kept RTN "
            f"(under {settings.expert_threshold(recipe.group_size)} routed tokens), "
            f"{state['rtnUnseen']} weights kept RTN (no calibration input)"
        )
        return True
    except CheckpointError as err:
        raise CheckpointError(f"GPTQ: {err}") from err
    finally:
        stream.close()


def _inputs(stream: LayerStream, source_dir: Path, settings: GptqSettings) -> list[torch.Tensor]:
    windows = token_windows(
        source_dir,
        int(stream.config.vocab_size),
        Path(settings.data) if settings.data is not None else None,
        CALIBRATION_DATA,
        samples=settings.samples,
        sequence_length=settings.sequence_length,
        grow_builtin=True,
    )
    return stream.embed(windows.samples)


def _layer(
    stream: LayerStream,
    index: int,
    hidden: list[torch.Tensor],
    recipe: RoundingRecipe,
    stored: dict[str, str],
) -> tuple[list[torch.Tensor], dict[str, torch.Tensor], dict[str, int]]:
    """The layer's outputs with rounded weights, its rounded tensors by artifact name, and counts."""
    layer_name = _module_names(stream)[id(stream.layers[index])]
    with stream.layer(index) as layer:
        targets, groups = layer_targets(layer, layer_name, recipe.rule, set(stored))
        with collecting(layer, layer_name, targets, groups) as sums:
            if targets:  # a layer with nothing to round runs once, to propagate
                stream.run_layer(layer, hidden, None)
        staged: dict[str, torch.Tensor] = {}
        kept: dict[str, set[str]] = {"gptq": set(), "rtnExperts": set(), "rtnUnseen": set()}
        for target in targets:
            rounded, how = _round(target, sums[target.hessian], recipe, stored)
            module = module_of(target.name)
            # An expert counts once however many of its projections fell back.
            kept[how].add(module_of(module) if how == "rtnExperts" else module)
            target.write(rounded.dequantized())
            staged[f"{module}.weight_packed"] = torch.from_numpy(rounded.packed())
            staged[f"{module}.weight_scale"] = rounded.scale.cpu()
        hidden = stream.run_layer(layer, hidden, None)
    return hidden, staged, {how: len(names) for how, names in kept.items()}


def _round(
    target: Target, inputs: InputSum, recipe: RoundingRecipe, stored: dict[str, str]
) -> tuple[Rounded, str]:
    settings = recipe.gptq
    assert settings is not None
    weight = target.read()
    spec = TensorSpec(target.name, stored[target.name], tuple(weight.shape))
    scale_dtype = quantized_outputs(spec, recipe.group_size)[1].dtype
    rounding = Rounding.for_source(spec.dtype, scale_dtype, recipe.group_size)
    if target.expert and inputs.tokens < settings.expert_threshold(recipe.group_size):
        return round_to_nearest(weight, rounding), "rtnExperts"
    if inputs.tokens == 0:
        return round_to_nearest(weight, rounding), "rtnUnseen"
    try:
        rounded = gptq_round(
            weight, inputs.hessian(), rounding, damp=settings.damp, act_order=settings.act_order
        )
    except NotPositiveDefinite as err:
        raise CheckpointError(
            f"GPTQ: {target.name}: {err} with --damp {settings.damp}; rerun with a larger --damp (e.g. 0.1)"
        ) from err
    return rounded, "gptq"


def _module_names(stream: LayerStream) -> dict[int, str]:
    return {id(module): name for name, module in stream.model.named_modules()}


def _layer_line(
    index: int, layers: int, counts: dict[str, int], recipe: RoundingRecipe, seconds: float
) -> str:
    parts = [f"{counts.get('gptq', 0)} weights by GPTQ"]
    if counts.get("rtnExperts") and recipe.gptq is not None:
        threshold = recipe.gptq.expert_threshold(recipe.group_size)
        parts.append(f"{counts['rtnExperts']} experts kept RTN (under {threshold} routed tokens)")
    if counts.get("rtnUnseen"):
        parts.append(f"{counts['rtnUnseen']} weights kept RTN (no calibration input)")
    return f"GPTQ layer {index + 1}/{layers}: {', '.join(parts)} ({seconds:.1f} s)"
