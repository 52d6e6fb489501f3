"""GPTQ is sized by the plan like calibration: the forward passes, the Hessian sums and the per-Linear
solves pick CPU or a GPU, and the convert container asks for what the plan says. A Kimi-K2-sized
GPU-served model gets a GPU; the tiny model stays on CPU; a CPU-served model never gets one; RTN and
unconverted weights have no GPTQ estimate and convert exactly as before."""

from __future__ import annotations

from pathlib import Path

from kvant_operator.api.status import PlanStatus
from kvant_operator.artifact_recipe import artifact_key
from kvant_operator.planner.calibration_sizing import CPU_BUDGET_S, CPU_FLOPS, with_calibration
from kvant_operator.planner.capacity_plan import PlanRequest, make_plan
from kvant_operator.planner.checkpoint_view import load_checkpoint
from kvant_operator.planner.gptq_sizing import GPTQ_WARNING, with_gptq
from kvant_operator.render import jobs
from kvant_operator.settings import OperatorSettings
from tests.unit.planner_configs import kimi_k2, llama_3_1_70b, write_config
from tests.unit.reconcile_fixtures import TINY_LLAMA
from tests.unit.render_inputs import body, spec_of

SETTINGS = OperatorSettings()
KIMI = "kimi-k2-int4-experts-fp8kv-8xh200.yaml"
KIMI_GPTQ = {
    "format": "int4",
    "method": "gptq",
    "groupSize": 32,
    "targets": "experts",
    "ignore": ["lm_head", r"re:.*mlp\.gate$"],
}
TINY_GPTQ = {
    "format": "int4",
    "groupSize": 32,
    "method": "gptq",
    "gptq": {"samples": 8, "sequenceLength": 128},
}


def planned(
    example: str, config: dict[str, object], tmp_path: Path, **spec: object
) -> tuple[PlanStatus, dict]:
    model = body(example, **spec)
    capacity = make_plan(
        load_checkpoint(write_config(tmp_path, config)), PlanRequest.from_spec(spec_of(model))
    )
    return with_gptq(with_calibration(capacity.to_status(), spec_of(model)), spec_of(model)), model


def convert_container(model: dict, plan: PlanStatus) -> dict:
    spec = spec_of(model)
    job = jobs.artifact_job([model], spec, SETTINGS, artifact_key(spec), attempt=1, plan=plan)
    pod = job["spec"]["template"]["spec"]
    container: dict = next(
        c for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == "convert"
    )
    return container


def test_a_kimi_sized_gpu_served_model_runs_gptq_on_a_gpu(tmp_path: Path) -> None:
    plan, model = planned(KIMI, kimi_k2(), tmp_path, weights=KIMI_GPTQ)
    gptq = plan.gptq
    assert gptq is not None and (gptq.samples, gptq.sequence_length) == (128, 2048)
    tokens = 128 * 2048
    forward = 2 * 2.0 * plan.active_parameters * tokens
    assert plan.weights is not None
    hessians, solve = plan.weights.hessian_flops_per_token * tokens, plan.weights.solve_flops
    assert gptq.flops == forward + hessians + solve
    # An expert's gate/up input (7168) and down input (2048), 384 experts in 60 MoE layers, 8 per token.
    per_token = 60 * 8 * 2.0 * (7168**2 + 2048**2)
    assert abs(plan.weights.hessian_flops_per_token - per_token) < 1e-6 * per_token
    assert plan.weights.hessian_bytes_per_layer == 384 * 4 * (7168**2 + 2048**2)
    assert 3e16 < gptq.flops < 1e17, f"{gptq.flops:.2e}"
    assert gptq.device == "cuda" and gptq.gpus == 1
    assert gptq.eta_seconds < 3600 < gptq.flops / CPU_FLOPS  # a GPU: minutes, not a week
    container = convert_container(model, plan)
    args = container["args"]
    assert args[args.index("--device") + 1] == "cuda"
    assert args.index("--device") > args.index("--samples"), "among GPTQ's flags"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    # The layer in float32 (~63 GiB) and its experts' Hessians (~80 GiB) overflow one 141 GiB H200.
    assert sum(w.startswith(GPTQ_WARNING) and "spec.weights.method: rtn" in w for w in plan.warnings) == 1
    again = with_gptq(plan, spec_of(model))
    assert sum(w.startswith(GPTQ_WARNING) for w in again.warnings) == 1, "recomputed, not repeated"


def test_the_tiny_model_runs_gptq_on_cpu_in_seconds(tmp_path: Path) -> None:
    plan, model = planned("tiny.yaml", TINY_LLAMA, tmp_path, weights=TINY_GPTQ)
    gptq = plan.gptq
    assert gptq is not None and gptq.device == "cpu" and gptq.gpus == 0
    assert (gptq.samples, gptq.sequence_length) == (8, 128)
    assert 0 < gptq.eta_seconds <= 1
    assert not any(w.startswith(GPTQ_WARNING) for w in plan.warnings)
    container = convert_container(model, plan)
    assert "--device" not in container["args"]
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}}


def test_a_cpu_served_model_never_gets_a_gpu_for_gptq(tmp_path: Path) -> None:
    serving = {"engine": "sglang", "device": "cpu", "cpu": {"memoryGiB": 256, "cores": 32}}
    plan, model = planned(
        "tiny.yaml", llama_3_1_70b(), tmp_path, weights={"format": "int4", "method": "gptq"}, serving=serving
    )
    gptq = plan.gptq
    assert gptq is not None and gptq.eta_seconds > CPU_BUDGET_S, "a day's work on CPU, still on CPU"
    assert gptq.device == "cpu" and gptq.gpus == 0
    container = convert_container(model, plan)
    assert "--device" not in container["args"]
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}}


def test_rtn_and_unconverted_weights_have_no_gptq_estimate(tmp_path: Path) -> None:
    rtn, model = planned(KIMI, kimi_k2(), tmp_path / "rtn")
    assert rtn.gptq is None and not any(w.startswith(GPTQ_WARNING) for w in rtn.warnings)
    container = convert_container(model, rtn)
    assert "--device" not in container["args"]
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}}
    bf16, _ = planned("tiny.yaml", TINY_LLAMA, tmp_path / "bf16", weights={"format": "bf16"})
    assert bf16.gptq is None
    assert bf16.weights is not None and bf16.weights.solve_flops == 0


def test_switching_to_rtn_drops_the_estimate_and_its_warning(tmp_path: Path) -> None:
    plan, _ = planned(KIMI, kimi_k2(), tmp_path, weights=KIMI_GPTQ)
    assert plan.gptq is not None and any(w.startswith(GPTQ_WARNING) for w in plan.warnings)
    rtn = with_gptq(plan, spec_of(body(KIMI)))
    assert rtn.gptq is None and not any(w.startswith(GPTQ_WARNING) for w in rtn.warnings)
