"""A spec with weight fields left unset plans what it builds: `kvant render` plans the model and
renders its conversion Job; the Job's own `kvant convert` command line, run for real, writes an
artifact of exactly the planned bytes, with the planned targets and group size.

The other plan-equals-artifact test hands both sides explicit values; this one leaves the defaults
to `kvant_contracts.weights_recipe`, including an MoE model with `targets` unset (routed experts
only), where the Job once said all-linear while the plan sized experts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvant_operator.render.artifact_containers import conversion_recipe
from kvant_operator.render.offline import render_offline
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.convert_harness import kvant
from tests.unit.render_inputs import body, plan, spec_of
from tests.unit.test_plan_bytes_equal_artifact_bytes import artifact_tensor_bytes

CASES = [
    # (architecture, spec.weights as written, the targets and group size the defaults must give)
    ("deepseek_v3", {"format": "int4"}, "experts", 128),
    ("deepseek_v3", {"format": "int4", "groupSize": 32}, "experts", 32),
    ("llama", {"format": "int4"}, "all-linear", 128),
    ("deepseek_v3", {"format": "int4", "targets": "all-linear"}, "all-linear", 128),
]


def _rendered(source: Path, weights: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The offline render's plan (from the plan Job's argv run here) and the convert container's args."""
    manifest = body(source={"uri": f"file://{source}"}, weights=weights, kvCache={"dtype": "bf16"})
    objects = render_offline(manifest, None, "team-a")
    jobs = [o for o in objects if o["kind"] == "Job"]
    plan_job = next(j for j in jobs if j["metadata"]["labels"]["app.kubernetes.io/component"] == "plan")
    plan_args = plan_job["spec"]["template"]["spec"]["containers"][0]["args"]
    plan_args[plan_args.index("--config") + 1] = str(source)
    planned = kvant(*plan_args)
    assert planned.returncode == 0, planned.stderr
    artifact = next(j for j in jobs if j["metadata"]["labels"]["app.kubernetes.io/component"] == "artifact")
    pod = artifact["spec"]["template"]["spec"]
    convert = next(c for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == "convert")
    return json.loads(planned.stdout), convert["args"]


@pytest.mark.parametrize(("arch", "weights", "targets", "group_size"), CASES, ids=str)
def test_unset_fields_build_what_was_planned(tmp_path, arch, weights, targets, group_size):
    source = tiny_checkpoint(arch, "bf16")
    plan, args = _rendered(source, weights)
    assert (plan["targets"], plan["group_size"]) == (targets, group_size)
    assert args[args.index("--targets") + 1] == targets
    assert args[args.index("--group-size") + 1] == str(group_size)
    args[1], args[2] = str(source), str(tmp_path / "out")  # the pod's mount paths, here
    done = kvant(*args)
    assert done.returncode == 0, done.stderr
    assert artifact_tensor_bytes(tmp_path / "out") == plan["checkpoint_bytes"]


@pytest.mark.parametrize(("arch", "targets"), [("deepseek_v3", "experts"), ("llama", "all-linear")])
def test_kvant_convert_defaults_targets_by_the_source_as_the_planner_does(tmp_path, arch, targets):
    done = kvant("convert", tiny_checkpoint(arch, "bf16"), tmp_path / "out", "--group-size", "32")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "out" / "kvant-manifest.json").read_text())
    assert manifest["recipe"]["targets"] == targets


@pytest.mark.parametrize(
    ("parameters", "active", "targets"), [(1000, 100, "experts"), (1000, 1000, "all-linear")]
)
def test_a_plan_from_an_older_operator_still_renders_the_planned_targets(parameters, active, targets):
    # An upgrade keeps status.plan (no plan Job, no phase change); one made before status.plan.weights
    # tells an MoE model by its active parameters, as the planner counted them.
    old = plan().model_copy(update={"weights": None, "parameters": parameters, "active_parameters": active})
    spec = spec_of(body(weights={"format": "int4"}))
    assert conversion_recipe(spec, old).targets == targets
