"""Calibration is sized by the plan: FLOPs from active parameters x tokens pick CPU or a GPU, and the
calibrate container asks for what the plan says. A Kimi-K2-sized model gets a GPU; the tiny model
stays on CPU exactly as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from kvant_operator.api.status import PlanStatus
from kvant_operator.artifact_recipe import artifact_key
from kvant_operator.planner.calibration_sizing import CPU_FLOPS, with_calibration
from kvant_operator.planner.capacity_plan import PlanRequest, make_plan
from kvant_operator.planner.checkpoint_view import load_checkpoint
from kvant_operator.render import jobs
from kvant_operator.settings import OperatorSettings
from tests.unit.planner_configs import kimi_k2, write_config
from tests.unit.reconcile_fixtures import TINY_LLAMA
from tests.unit.render_inputs import body, spec_of

SETTINGS = OperatorSettings()
KIMI = "kimi-k2-int4-experts-fp8kv-8xh200.yaml"
EXAMPLES = Path(__file__).parents[2] / "examples"


def planned(
    example: str, config: dict[str, object], tmp_path: Path, **spec: object
) -> tuple[PlanStatus, dict]:
    model = body(example, **spec)
    capacity = make_plan(
        load_checkpoint(write_config(tmp_path, config)), PlanRequest.from_spec(spec_of(model))
    )
    return with_calibration(capacity.to_status(), spec_of(model)), model


def calibrate_container(model: dict, plan: PlanStatus) -> dict:
    spec = spec_of(model)
    job = jobs.artifact_job([model], spec, SETTINGS, artifact_key(spec), attempt=1, plan=plan)
    container: dict = job["spec"]["template"]["spec"]["containers"][-1]
    assert container["name"] == "calibrate"
    return container


def test_a_kimi_sized_model_calibrates_on_a_gpu_with_its_estimate_in_the_plan(tmp_path: Path) -> None:
    plan, model = planned(KIMI, kimi_k2(), tmp_path)
    assert 0.95e12 < plan.parameters < 1.1e12, plan.parameters  # ~1.03 T
    assert 28e9 < plan.active_parameters < 36e9, plan.active_parameters  # ~32 B active
    calibration = plan.calibration
    assert calibration is not None and (calibration.samples, calibration.sequence_length) == (512, 2048)
    assert calibration.flops == 2.0 * plan.active_parameters * 512 * 2048
    assert calibration.device == "cuda" and calibration.gpus == 1
    assert calibration.eta_seconds < 3600 < calibration.flops / CPU_FLOPS  # a GPU: minutes, not days
    container = calibrate_container(model, plan)
    assert container["args"][-2:] == ["--device", "cuda"]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_the_tiny_model_stays_on_cpu_as_before(tmp_path: Path) -> None:
    plan, model = planned("tiny.yaml", TINY_LLAMA, tmp_path)
    assert plan.calibration is not None and plan.calibration.device == "cpu" and plan.calibration.gpus == 0
    container = calibrate_container(model, plan)
    assert "--device" not in container["args"]
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}}


def test_activations_that_overflow_one_gpu_are_a_plan_warning(tmp_path: Path) -> None:
    calibration = {"samples": 4096, "sequenceLength": 32768}
    plan, _ = planned(
        KIMI,
        kimi_k2(),
        tmp_path,
        kvCache={"dtype": "fp8_e4m3", "scales": "calibrate", "calibration": calibration},
    )
    assert any(w.startswith("calibration holds one layer") and "sequenceLength" in w for w in plan.warnings)
    again = with_calibration(
        plan,
        spec_of(body(KIMI, kvCache={"dtype": "fp8_e4m3", "scales": "calibrate", "calibration": calibration})),
    )
    assert sum(w.startswith("calibration holds") for w in again.warnings) == 1, "recomputed, not repeated"


def test_no_calibration_no_estimate(tmp_path: Path) -> None:
    plan, _ = planned("tiny.yaml", TINY_LLAMA, tmp_path, kvCache={"dtype": "bf16"})
    assert plan.calibration is None


def test_the_offline_render_shows_the_gpu_request(tmp_path: Path) -> None:
    config = write_config(tmp_path / "kimi", kimi_k2())
    argv = [
        sys.executable,
        "-m",
        "kvant_cli.main",
        "render",
        "-f",
        str(EXAMPLES / KIMI),
        "--checkpoint",
        str(config),
    ]
    rendered = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert rendered.returncode == 0, rendered.stderr
    job = next(
        d for d in yaml.safe_load_all(rendered.stdout) if d["metadata"]["name"].startswith("kvant-artifact-")
    )
    calibrate = job["spec"]["template"]["spec"]["containers"][-1]
    assert calibrate["args"][-2:] == ["--device", "cuda"]
    assert calibrate["resources"]["limits"] == {"nvidia.com/gpu": "1"}
