"""Each contract between operator and runtime has exactly one definition, in kvant_contracts.

Two checks: no module of the operator or the runtime defines a class of a contract's name (so nobody
re-grows a private copy), and both sides hand each other the contract's own type: what the operator
renders, the runtime parses back to an equal object.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

import kvant_contracts.limits as limits_contract
from kvant_contracts import int4_artifact, job_lines, launch_spec, safetensors_header
from kvant_operator.planner import inventory
from kvant_operator.planner import weights as planner_weights
from kvant_operator.reconcile import artifact_step, evaluation_step
from kvant_operator.render.limits_configmap import limits_configmap, limits_for
from kvant_operator.render.roles import roles
from kvant_operator.render.serving import ServingInputs, deployment
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import Location
from kvant_runtime.calibrate import calibrator
from kvant_runtime.convert import converter, progress, recipe, safetensors_io, shard
from kvant_runtime.evaluate import evaluator
from kvant_runtime.gate import admission, loops
from kvant_runtime.launch import argv
from tests.unit.render_inputs import body, plan, spec_of

ROOT = Path(__file__).resolve().parents[2]
# (The API's own models, such as spec.protection's ConcurrencyBounds, are the CR, not a contract.)
CONTRACT_CLASSES = {
    "Limits",
    "LaunchSpec",
    "TargetRule",
    "TensorSpec",
    "ConvertProgress",
    "ArtifactResult",
    "EvalVerdict",
    "HeaderEntry",
    "TensorInfo",
}


def _defined_classes(source_root: Path) -> list[str]:
    found = []
    for path in source_root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name in CONTRACT_CLASSES:
                found.append(f"{path.relative_to(ROOT)}: class {node.name}")
    return found


@pytest.mark.parametrize("package", ["operator/src", "runtime/src"])
def test_no_side_defines_its_own_copy_of_a_contract(package: str) -> None:
    assert _defined_classes(ROOT / package) == []


def test_both_sides_use_the_contract_types() -> None:
    assert vars(admission)["Limits"] is vars(loops)["Limits"] is limits_contract.Limits
    assert vars(argv)["LaunchSpec"] is launch_spec.LaunchSpec
    assert vars(recipe)["TargetRule"] is int4_artifact.TargetRule
    assert vars(converter)["ArtifactResult"] is vars(calibrator)["ArtifactResult"] is job_lines.ArtifactResult
    assert vars(artifact_step)["ArtifactResult"] is job_lines.ArtifactResult
    assert vars(progress)["ConvertProgress"] is vars(artifact_step)["ConvertProgress"]
    assert vars(evaluator)["EvalVerdict"] is vars(evaluation_step)["EvalVerdict"] is job_lines.EvalVerdict
    assert vars(safetensors_io)["read_header"] is safetensors_header.read_header
    assert vars(inventory)["safetensors_header"] is safetensors_header
    converter_rule, planner_rule = vars(shard)["int4_outputs"], vars(planner_weights)["int4_outputs"]
    assert converter_rule is planner_rule is int4_artifact.int4_outputs


@pytest.mark.parametrize("example", ["tiny.yaml", "kimi-k2-int4-experts-fp8kv-8xh200.yaml"])
def test_the_limits_the_operator_renders_are_what_the_gate_reads(example: str) -> None:
    model = body(example)
    spec = spec_of(model)
    configmap = limits_configmap(model, spec, 5)
    text = configmap["data"][limits_contract.LIMITS_FILE]
    assert limits_contract.parse_limits_text(text, "limits.yaml") == limits_for(spec, 5)
    assert set(yaml.safe_load(text)) >= set(limits_contract.FILE_FIELDS)


@pytest.mark.parametrize(
    "example", ["kimi-k2-int4-experts-fp8kv-8xh200.yaml", "llama-70b-prefill-decode-fp8kv.yaml"]
)
def test_the_launch_spec_the_operator_renders_is_what_the_launcher_reads(example: str) -> None:
    model = body(example)
    spec = spec_of(model)
    model_dir = Location({"name": "model", "emptyDir": {}}, "/artifacts", "abc")
    inputs = ServingInputs(model, spec, plan(), model_dir, "sha256:abc", OperatorSettings())
    for role in roles(spec):
        engine = deployment(inputs, role)["spec"]["template"]["spec"]["containers"][0]
        parsed = launch_spec.parse_spec_json(engine["args"][engine["args"].index("--spec-json") + 1])
        assert parsed.to_json() == engine["args"][-1]
        assert parsed.disaggregationRole == role.disaggregation
        assert parsed.kvCacheDtype == role.kv_cache_dtype.value


def test_a_job_line_with_wrong_types_is_no_result() -> None:
    good = {"digest": "sha256:1", "bytes": 10, "sourceBytes": 20}
    assert job_lines.ArtifactResult.from_log(f"log text\n{json.dumps(good)}\nmore text") == (
        job_lines.ArtifactResult("sha256:1", 10, 20)
    )
    for bad in ({"bytes": -1}, {"bytes": True}, {"bytes": "10"}, {"digest": None}):
        assert job_lines.ArtifactResult.from_log(json.dumps({**good, **bad})) is None, bad
    verdict = {"meanKLDivergence": 0.01, "top1Agreement": 0.9, "passed": True}
    assert job_lines.EvalVerdict.from_log(json.dumps(verdict)) is not None
    assert job_lines.EvalVerdict.from_log(json.dumps({**verdict, "meanKLDivergence": float("nan")})) is None
    assert job_lines.EvalVerdict.from_log(json.dumps({**verdict, "passed": 1})) is None
