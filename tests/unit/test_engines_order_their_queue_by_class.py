"""SGLang's priority scheduling is on by default (spec.serving.priorityScheduling), so the engine orders
its own waiting queue by the class the gate writes (#38 item 5, measured in bench/README); it is left
out where the spec turns it off or engineArgs choose a schedule policy SGLang cannot order by
priority, and asking for both is refused at admission, naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kvant_contracts.launch_spec import LaunchSpec, parse_spec_json
from kvant_contracts.tenancy import ENGINE_PRIORITY
from kvant_operator.artifact_recipe import source_location
from kvant_operator.render.engine_priority import ENABLE, priority_flags, schedule_policy
from kvant_operator.render.roles import roles
from kvant_operator.render.serving import ServingInputs, deployment, serving_objects
from kvant_operator.settings import OperatorSettings
from kvant_runtime.launch.argv import checkpoint_quant_method, kvant_argv
from kvant_runtime.launch.validate import validate_argv
from tests.unit.launch_fixtures import checkpoint
from tests.unit.render_inputs import body, plan, spec_of

STANDARD_DEFAULT = f"--default-priority-value={ENGINE_PRIORITY['standard']}"


def _engine_args(example: str, **serving: Any) -> dict[str, list[str]]:
    """Each engine Deployment's engine flags, as its launch spec carries them."""
    model = body(example)
    model["spec"]["serving"].update(serving)
    spec = spec_of(model)
    inputs = ServingInputs(model, spec, plan(), source_location(spec), "", OperatorSettings())
    found = {}
    for o in serving_objects(inputs, None):
        if o["kind"] != "Deployment" or o["metadata"]["name"].endswith("-router"):
            continue
        engine = o["spec"]["template"]["spec"]["containers"][0]
        spec_json = engine["args"][engine["args"].index("--spec-json") + 1]
        found[o["metadata"]["name"]] = json.loads(spec_json)["engineArgs"]
    return found


def test_every_sglang_engine_orders_its_queue_by_class_by_default() -> None:
    for example in ("tinychat-cpu.yaml", "llama-70b-prefill-decode-fp8kv.yaml"):
        found = _engine_args(example)
        assert found, example
        for name, args in found.items():
            assert args[:2] == [ENABLE, STANDARD_DEFAULT], (example, name, args)


def test_the_spec_and_the_engine_args_can_leave_it_out() -> None:
    assert all(ENABLE not in a for a in _engine_args("tinychat-cpu.yaml", priorityScheduling=False).values())
    # A schedule policy SGLang cannot order by priority (it asserts fcfs or lof) keeps its own order.
    chosen = _engine_args("tinychat-cpu.yaml", engineArgs=["--schedule-policy", "lpm"])
    assert all(a == ["--schedule-policy", "lpm"] for a in chosen.values()), chosen
    # The user's own flags are not doubled.
    own = ["--enable-priority-scheduling", "--default-priority-value=0"]
    assert all(a == own for a in _engine_args("tinychat-cpu.yaml", engineArgs=own).values())


@pytest.mark.parametrize(
    ("args", "policy"),
    [([], None), (["--schedule-policy=lof"], "lof"), (["--schedule-policy", "lpm", "--x"], "lpm")],
)
def test_the_schedule_policy_is_read_in_both_forms(args: list[str], policy: str | None) -> None:
    assert schedule_policy(args) == policy
    assert (ENABLE in priority_flags(None, args)) is (policy in (None, "fcfs", "lof"))


@pytest.mark.parametrize(
    "serving",
    [
        {"engineArgs": ["--schedule-policy=lpm"]},
        {"engineArgs": ["--schedule-policy", "fcfs"]},
    ],
)
def test_asking_for_priority_and_a_policy_sglang_refuses_with_it_is_refused(serving: dict[str, Any]) -> None:
    model = body("tinychat-cpu.yaml")
    model["spec"]["serving"].update({"priorityScheduling": True, **serving})
    with pytest.raises(ValidationError) as refused:
        spec_of(model)
    assert "spec.serving.priorityScheduling" in str(refused.value)
    model["spec"]["serving"]["engineArgs"] = ["--schedule-policy=lof"]
    spec_of(model)  # the policies SGLang accepts with it pass


def test_sglangs_own_parser_reads_the_rendered_flags(tmp_path: Path) -> None:
    """Both roles of the prefill/decode example, through the launcher's argv and SGLang's parser."""
    model = body("llama-70b-prefill-decode-fp8kv.yaml")
    spec = spec_of(model)
    inputs = ServingInputs(model, spec, plan(), source_location(spec), "sha256:abc", OperatorSettings())
    folder = checkpoint(tmp_path, "gqa", "bf16")
    engine_roles = roles(spec)
    assert len(engine_roles) == 2, f"expected a prefill and a decode role, got {engine_roles}"
    for role in engine_roles:
        engine = deployment(inputs, role)["spec"]["template"]["spec"]["containers"][0]
        launch = parse_spec_json(engine["args"][2])
        local = LaunchSpec(**{**launch.__dict__, "modelPath": str(folder), "weightsFormat": "bf16"})
        argv = kvant_argv(local, checkpoint_quant_method(folder)) + list(local.engineArgs)
        server = validate_argv(argv, list(local.engineArgs))
        assert server.enable_priority_scheduling, role.name
        assert server.default_priority_value == ENGINE_PRIORITY["standard"], role.name
        assert server.schedule_policy in ("fcfs", "lof"), role.name
