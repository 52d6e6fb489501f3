"""The containers of the artifact Job: `kvant convert` (what the plan sized, every value explicit; GPTQ
on the device of the plan's GPTQ estimate) and `kvant calibrate` (sized by the plan's calibration
estimate, for the served KV format)."""

from __future__ import annotations

from dataclasses import replace

from kvant_contracts.kube_object import Obj
from kvant_contracts.weights_recipe import GPTQ, WeightsRecipe
from kvant_operator.api.spec import GptqSpec, QuantizedModelSpec
from kvant_operator.api.status import CalibratedRun, PlanStatus
from kvant_operator.settings import OperatorSettings


def conversion_recipe(spec: QuantizedModelSpec, plan: PlanStatus) -> WeightsRecipe:
    """What the conversion builds: the spec's recipe, with the default that depends on the source
    (targets: experts for MoE) taken from the plan that sized it."""
    if plan.weights is None:
        # A plan an older operator made (an upgrade keeps plans, to start no Job and change no
        # phase): an MoE model is the one whose token passes through fewer parameters than it has.
        return spec.weights.recipe(converts=True, moe=0 < plan.active_parameters < plan.parameters)
    recipe = spec.weights.recipe(converts=True, moe=plan.weights.moe)
    if plan.weights.targets is not None:  # what the plan sized is what gets built
        recipe = replace(recipe, targets=plan.weights.targets.value)
    return recipe


def convert_container(
    recipe: WeightsRecipe,
    spec: QuantizedModelSpec,
    settings: OperatorSettings,
    source: str,
    output: str,
    *,
    mode: list[str],
    sizing: CalibratedRun | None,
) -> Obj:
    """`mode`: nothing (one pod), the worker flags (one pod of an Indexed Job), or --finalize. Every
    value of `recipe` goes on the command line, so no default of `kvant convert`'s is ever relied on.
    `sizing`: the plan's GPTQ estimate (status.plan.gptq), which only GPTQ reads."""
    weights = spec.weights
    assert recipe.targets is not None and recipe.group_size is not None and recipe.method is not None
    gptq = recipe.method == GPTQ
    device, resources = run_device(spec, sizing if gptq else None)
    args = [
        "convert",
        source,
        output,
        "--format",
        recipe.format,
        "--group-size",
        str(recipe.group_size),
        "--targets",
        recipe.targets,
        "--method",
        recipe.method,
        *(gptq_args(weights.gptq or GptqSpec(), source) + device if gptq else []),
        "--progress-json",
        "-",
        *mode,
    ]
    if spec.source.revision:
        args += ["--revision", spec.source.revision]
    for pattern in weights.ignore:
        args += ["--ignore", pattern]
    return {
        "name": "convert",
        "image": settings.runtime_image,
        "command": ["kvant"],
        "args": args,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": resources,
    }


def run_device(spec: QuantizedModelSpec, sizing: CalibratedRun | None) -> tuple[list[str], Obj]:
    """The device flags and resources of a run the plan sized (planner/calibration_sizing.py,
    planner/gptq_sizing.py): the GPUs it asks for on cuda, one CPU otherwise."""
    gpu = spec.serving.gpu
    if sizing is None or sizing.device != "cuda" or gpu is None:
        return [], {"requests": {"cpu": "1", "memory": "2Gi"}}
    gpus = str(sizing.gpus)
    requests = {"cpu": "4", "memory": "32Gi", gpu.resource: gpus}
    return ["--device", "cuda"], {"requests": requests, "limits": {gpu.resource: gpus}}


def gptq_args(gptq: GptqSpec, source: str) -> list[str]:
    """GPTQ's settings, each explicit; a dataset is a path inside the source."""
    args = [
        "--samples",
        str(gptq.samples),
        "--sequence-length",
        str(gptq.sequence_length),
        "--damp",
        str(gptq.dampening),
        "--act-order" if gptq.act_order else "--no-act-order",
    ]
    if gptq.dataset != "builtin":
        args += ["--data", f"{source}/{gptq.dataset}"]
    return args


def calibrate_container(
    spec: QuantizedModelSpec,
    settings: OperatorSettings,
    source: str,
    artifact: str,
    sizing: CalibratedRun | None,
) -> Obj:
    calibration = spec.kv_cache.calibration
    assert calibration is not None  # defaulted whenever scales are calibrated
    args = [
        "calibrate",
        artifact,
        "--samples",
        str(calibration.samples),
        "--sequence-length",
        str(calibration.sequence_length),
        # The --quantization-param-path JSON holds one scale map per TP rank; SGLang falls back to
        # 1.0 when the count differs from the engine's, so it is written for the serving TP.
        "--tp",
        str(spec.serving.tensor_parallel),
        # The served format's range sets the scales: e5m2's largest value is 57344, e4m3's 448.
        "--kv-dtype",
        spec.kv_cache.dtype.value,
    ]
    if calibration.dataset != "builtin":
        args += ["--data", f"{source}/{calibration.dataset}"]  # a path inside the source
    device, resources = run_device(spec, sizing)
    args += device
    return {
        "name": "calibrate",
        "image": settings.runtime_image,
        "command": ["kvant"],
        "args": args,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": resources,
    }
