"""spec.serving.scheduler: SGLang's own admission knobs, from the CR to the engine's command line and
environment (checked by SGLang's own parser), to the simulator, and refused when out of bounds."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from kvant_contracts.engine_scheduler import KNOBS
from kvant_contracts.launch_spec import LaunchSpec, SpecError, parse_spec_json
from kvant_operator.api.rules import SpecError as ApiSpecError
from kvant_runtime.launch.argv import checkpoint_quant_method, kvant_argv
from kvant_runtime.launch.validate import validate_argv
from kvant_runtime.sim.engine import Engine, EngineConfig
from kvant_runtime.sim.sim_command import _scheduler_knobs
from tests.unit.launch_fixtures import checkpoint
from tests.unit.render_inputs import body, engine_containers, spec_of

SET = {
    "conservativeness": 1.3,
    "minNewTokenRatioFactor": 0.5,
    "newTokenRatioDecaySteps": 200,
    "clipMaxNewTokensEstimation": 2048,
}
ENV = {
    "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR": "0.5",
    "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS": "200",
    "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": "2048",
}


def test_every_engine_of_the_model_launches_with_the_knobs_and_sglangs_parser_reads_them(tmp_path):
    containers = engine_containers("llama-70b-prefill-decode-fp8kv.yaml", {"scheduler": SET})
    assert len(containers) == 2  # both roles
    folder = checkpoint(tmp_path, "gqa", "bf16")
    for engine in containers:
        launch = parse_spec_json(engine["args"][2])
        assert launch.scheduler == SET
        local = LaunchSpec(**{**launch.__dict__, "modelPath": str(folder), "weightsFormat": "bf16"})
        argv = kvant_argv(local, checkpoint_quant_method(folder)) + list(local.engineArgs)
        assert validate_argv(argv, list(local.engineArgs)).schedule_conservativeness == 1.3


def test_the_launcher_sets_sglangs_environment_before_it_starts_sglang(tmp_path):
    folder = checkpoint(tmp_path, "gqa", "bf16")
    spec = LaunchSpec(modelPath=str(folder), servedModelName="m", weightsFormat="bf16", scheduler=SET)
    command = [sys.executable, "-m", "kvant_cli.main", "launch", "--dry-run", "--spec-json", spec.to_json()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    shown = done.stdout.strip().splitlines()[-1]
    for name, value in ENV.items():
        assert f"{name}={value}" in shown.split()
    assert "--schedule-conservativeness 1.3" in shown


def test_a_model_that_sets_no_knob_renders_no_trace_of_them():
    """The launch spec is in the pod template: an upgrade that adds the field must not restart
    engines that do not use it."""
    engines = engine_containers("kimi-k2-int4-experts-fp8kv-8xh200.yaml", {})
    assert engines, "the example renders no engine containers"
    for engine in engines:
        assert "scheduler" not in json.loads(engine["args"][2])
        assert "env" not in engine or not any(e["name"].startswith("SGLANG_") for e in engine["env"])


def test_the_simulator_takes_the_same_flag_and_environment(monkeypatch):
    (engine,) = engine_containers("tiny.yaml", {"scheduler": SET})
    assert engine["args"][0] == "sim"
    assert engine["args"][engine["args"].index("--schedule-conservativeness") + 1] == "1.3"
    assert {e["name"]: e["value"] for e in engine["env"] if e["name"].startswith("SGLANG_")} == ENV
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    knobs = _scheduler_knobs(1.3)
    assert knobs == SET
    config = EngineConfig(
        1000,
        8,
        4096,
        new_token_ratio=min(0.7 * 1.3, 1.0),
        min_new_token_ratio_factor=0.5,
        new_token_ratio_decay_steps=200,
        clip_max_new_tokens=2048,
    )
    sim = Engine(config)
    assert sim.new_token_ratio == pytest.approx(0.91)
    assert sim.min_new_token_ratio == pytest.approx(0.455)
    monkeypatch.setenv("SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS", "many")
    assert _scheduler_knobs(1.0) == "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS must be a number, got 'many'"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("conservativeness", 0),
        ("conservativeness", 11),
        ("minNewTokenRatioFactor", 1.5),
        ("newTokenRatioDecaySteps", 0),
        ("newTokenRatioDecaySteps", 2.5),
        ("clipMaxNewTokensEstimation", -1),
        ("retractDecodeSteps", 3),
    ],
)
def test_an_invalid_knob_is_refused_naming_it(field, value):
    with pytest.raises(ValidationError, match=field):
        spec_of(body(serving={**body()["spec"]["serving"], "scheduler": {field: value}}))
    with pytest.raises(SpecError, match=field):
        LaunchSpec(modelPath="/m", servedModelName="m", weightsFormat="bf16", scheduler={field: value})


def test_conservativeness_in_engine_args_stays_valid_but_not_beside_the_field():
    """Models that set it in engineArgs before the field existed keep validating."""
    flag = ["--schedule-conservativeness=0.3"]
    serving = body()["spec"]["serving"]
    assert spec_of(body(serving={**serving, "engineArgs": flag})).serving.engine_args == flag
    both = {**serving, "engineArgs": flag, "scheduler": {"conservativeness": 0.3}}
    with pytest.raises((ValidationError, ApiSpecError), match=r"spec\.serving\.scheduler\.conservativeness"):
        spec_of(body(serving=both))
    pd = body("llama-70b-prefill-decode-fp8kv.yaml")
    pd["spec"]["serving"]["disaggregation"]["decode"]["engineArgs"] = ["--schedule-conservativeness", "2"]
    pd["spec"]["serving"]["scheduler"] = {"conservativeness": 0.3}
    with pytest.raises((ValidationError, ApiSpecError), match="an engineArgs list passes"):
        spec_of(pd)
    with pytest.raises(SpecError, match="set one"):
        LaunchSpec(
            modelPath="/m",
            servedModelName="m",
            weightsFormat="bf16",
            scheduler={"conservativeness": 0.3},
            engineArgs=tuple(flag),
        )


def test_every_knob_is_a_field_of_the_api():
    fields = set(spec_of(body()).serving.scheduler.model_dump(by_alias=True))
    assert fields == {knob.field for knob in KNOBS}
