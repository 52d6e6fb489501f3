"""Each contract between operator and runtime has exactly one definition, in kvant_contracts.

The checks: no module of the operator or the runtime defines a class of a contract's name (so nobody
re-grows a private copy); both sides hand each other the contract's own type: what the operator
renders, the runtime parses back to an equal object; and the shared facts are written once: no
source tree outside `kvant_contracts.sglang_metrics` spells an SGLang metric name, and the API's
limits and protection defaults come from the limits contract, not from number literals.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import kvant_contracts.limits as limits_contract
from kvant_contracts import (
    int4_artifact,
    job_lines,
    kv_dtypes,
    launch_spec,
    retraction_rate,
    safetensors_header,
)
from kvant_contracts import sglang_metrics as metric_names
from kvant_kernels.fp8 import KV_FP8_FORMATS
from kvant_operator.api import spec as api_spec
from kvant_operator.planner import inventory
from kvant_operator.planner import weights as planner_weights
from kvant_operator.protection import decide as protection_decide
from kvant_operator.protection import samples as protection_samples
from kvant_operator.reconcile import artifact_step, evaluation_step
from kvant_operator.render.limits_configmap import limits_configmap, limits_for
from kvant_operator.render.roles import roles
from kvant_operator.render.serving import ServingInputs, deployment
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import Location
from kvant_runtime import job_progress as progress
from kvant_runtime.calibrate import calibrator
from kvant_runtime.checkpoint import safetensors_io
from kvant_runtime.convert import converter, recipe, shard
from kvant_runtime.evaluate import evaluator
from kvant_runtime.gate import admission, loops
from kvant_runtime.gate import concurrency as gate_concurrency
from kvant_runtime.launch import argv
from tests.unit.render_inputs import body, plan, spec_of

ROOT = Path(__file__).resolve().parents[2]
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
    "ConcurrencyBounds",
    "FormatFacts",
    "KvCacheDtype",
    "ProtectionMode",
    "Device",
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


# Where shared facts may be written. Tests are not scanned: they restate facts on purpose, to pin them.
SOURCE_TREES = ("operator/src", "runtime/src", "devcluster/src", "bench", "cli/src", "contracts/src")
METRIC_NAMES_HOME = ROOT / "contracts/src/kvant_contracts/sglang_metrics.py"
# An SGLang metric name, or the bare prefix a name would be built from; not an image (lmsysorg/sglang:v…).
SGLANG_METRIC = re.compile(r"(?<![\w/.-])sglang:(?:(?!v\d)[a-z_]|$)")
# The API's limits/protection fields and the limits contract's field each takes its default from.
API_DEFAULTS_FROM_CONTRACT = {
    ("LimitsSpec", "max_concurrency"): "maxConcurrency",
    ("LimitsSpec", "max_queued"): "maxQueued",
    ("LimitsSpec", "queue_timeout_seconds"): "queueTimeoutSeconds",
    ("LimitsSpec", "default_max_tokens"): "defaultMaxTokens",
    ("LimitsSpec", "admission"): "admission",
    ("LimitsSpec", "forecast_quantile"): "forecastQuantile",
    ("LimitsSpec", "oversize_requests"): "oversizeRequests",
    ("ProtectionSpec", "mode"): "mode",
    ("ProtectionSpec", "target_token_usage"): "targetTokenUsage",
    ("ProtectionSpec", "max_retractions_per_minute"): "maxRetractionsPerMinute",
    ("ConcurrencyRangeSpec", "min"): "concurrency.min",
}
LIMITS_MODELS = {"LimitsSpec", "ConcurrencyRangeSpec", "ProtectionSpec"}


def _sources() -> Iterator[Path]:
    for tree in SOURCE_TREES:
        yield from sorted((ROOT / tree).rglob("*.py"))


def _string_literals(path: Path) -> Iterator[tuple[int, str]]:
    """Every string constant of a module (docstrings and f-string pieces included), with its line."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def sglang_names_outside_their_home() -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line}: {text[:80]!r}"
        for path in _sources()
        if path != METRIC_NAMES_HOME
        for line, text in _string_literals(path)
        if SGLANG_METRIC.search(text)
    ]


def _field_defaults(tree: ast.Module) -> Iterator[tuple[str, str, ast.expr | None, ast.expr | None]]:
    """(class, field, default expression, description expression) of the limits/protection models."""
    for node in tree.body:
        if not (isinstance(node, ast.ClassDef) and node.name in LIMITS_MODELS):
            continue
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value):
                continue
            default: ast.expr | None = item.value
            description: ast.expr | None = None
            if isinstance(item.value, ast.Call) and getattr(item.value.func, "id", "") == "Field":
                keywords = {k.arg: k.value for k in item.value.keywords}
                default, description = keywords.get("default"), keywords.get("description")
            yield node.name, item.target.id, default, description


def api_defaults_written_as_literals() -> list[str]:
    """Limits/protection defaults written as literals in the API, or restated in a description."""
    path = Path(api_spec.__file__)
    found = []
    for model, name, default, description in _field_defaults(ast.parse(path.read_text())):
        where = f"{path.relative_to(ROOT)}:{model}.{name}"
        if isinstance(default, ast.Constant) and default.value is not None:
            found.append(f"{where}: default={default.value!r} (take it from the limits contract)")
        value = getattr(api_spec, model).model_fields[name].default
        if description is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        # The literal text of the description (an f-string's values are generated, so they may say it).
        pieces = [description] if isinstance(description, ast.Constant) else ast.walk(description)
        literal = " ".join(
            p.value for p in pieces if isinstance(p, ast.Constant) and isinstance(p.value, str)
        )
        if re.search(rf"(?<![\d.]){re.escape(f'{value:g}')}(?![\d.])", literal):
            found.append(f"{where}: the description restates the default {value:g} as a literal")
    return found


def test_sglang_metric_names_are_written_only_in_the_contract() -> None:
    assert sglang_names_outside_their_home() == []


# Product packages (bench, tests and docs restate names on purpose) and the one home of the KV dtypes.
PRODUCT_TREES = ("operator/src", "runtime/src", "kernels/src", "cli/src", "devcluster/src")
KV_DTYPES_HOME = ROOT / "contracts/src/kvant_contracts"
# An FP8 KV dtype's name anywhere in a string. (auto and bf16 are words of other vocabularies too:
# the weight formats, tokenizer modes; the FP8 names are the KV cache's own.)
FP8_KV_DTYPE = re.compile(r"(?<![\w])fp8_e(?:4m3|5m2)(?![\w])")


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring constants of a module and its classes and functions (they are docs)."""
    owners = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef))]
    found = set()
    for owner in owners:
        first = owner.body[0] if owner.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            found.add(id(first.value))
    return found


def kv_dtypes_spelled_outside_the_contract() -> list[str]:
    """Every string of the product that names an FP8 KV dtype outside kvant_contracts: enum members,
    argparse choices and defaults, CEL rules and messages all take it from kvant_contracts.kv_dtypes."""
    found = []
    for tree_name in PRODUCT_TREES:
        for path in sorted((ROOT / tree_name).rglob("*.py")):
            tree = ast.parse(path.read_text())
            docs = _docstrings(tree)
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:80]!r}"
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and FP8_KV_DTYPE.search(node.value)
            ]
    return found


def test_kv_dtypes_are_spelled_only_in_the_contract() -> None:
    assert kv_dtypes_spelled_outside_the_contract() == []
    # The API's enums are the contracts', and every KV dtype list of the product is built from it.
    assert vars(api_spec)["KvCacheDtype"] is kv_dtypes.KvCacheDtype
    assert vars(api_spec)["ProtectionMode"] is limits_contract.ProtectionMode
    assert vars(launch_spec)["KV_DTYPE_NAMES"] is kv_dtypes.KV_DTYPE_NAMES
    assert vars(evaluator)["KV_DTYPE_NAMES"] is kv_dtypes.KV_DTYPE_NAMES
    assert tuple(KV_FP8_FORMATS) == kv_dtypes.FP8_KV_DTYPE_NAMES


def test_the_kv_dtype_check_finds_a_new_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above fails on the copy the issue found (the simulator's own choices list)."""
    copy = tmp_path / "runtime/src/copy.py"
    copy.parent.mkdir(parents=True)
    copy.write_text(
        '"""Mentions fp8_e4m3 in a docstring, which is fine."""\nCHOICES = ["auto", "fp8_e5m2"]\n'
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert kv_dtypes_spelled_outside_the_contract() == ["runtime/src/copy.py:2: 'fp8_e5m2'"]


OBJ_HOME = ROOT / "contracts/src/kvant_contracts/kube_object.py"


def _declares_obj(node: ast.stmt) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else []
    if isinstance(node, ast.AnnAssign):
        targets = [node.target]
    return any(isinstance(target, ast.Name) and target.id == "Obj" for target in targets)


def obj_aliases_outside_their_home() -> list[str]:
    """Modules (tests, e2e and benches too) that declare their own `Obj` alias instead of importing
    kvant_contracts.kube_object's."""
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for tree in (*SOURCE_TREES, "tests", "e2e")
        for path in sorted((ROOT / tree).rglob("*.py"))
        if path != OBJ_HOME
        for node in ast.parse(path.read_text()).body
        if _declares_obj(node)
    ]


def test_one_obj_alias() -> None:
    assert obj_aliases_outside_their_home() == []


def test_the_api_takes_the_limits_defaults_from_the_contract() -> None:
    assert api_defaults_written_as_literals() == []
    gate = limits_contract.Limits()
    protection = api_spec.ProtectionSpec()
    api = {"LimitsSpec": api_spec.LimitsSpec(), "ProtectionSpec": protection}
    api["ConcurrencyRangeSpec"] = protection.concurrency
    for (model, name), contract_name in API_DEFAULTS_FROM_CONTRACT.items():
        expected: object = gate
        for part in contract_name.split("."):
            expected = getattr(expected, part)
        assert getattr(api[model], name) == expected, f"{model}.{name} != Limits().{contract_name}"


def test_the_gate_and_protection_share_one_rate_and_one_decrease() -> None:
    rate = retraction_rate.RetractionRate
    assert vars(gate_concurrency)["RetractionRate"] is vars(protection_samples)["RetractionRate"] is rate
    bounds = protection_decide.Bounds(
        floor=1, ceiling=8, target_token_usage=0.9, max_retractions_per_minute=0
    )
    assert bounds.decrease_factor == limits_contract.ConcurrencyBounds().decreaseFactor
    assert api_spec.ProtectionSpec.model_fields["max_retractions_per_minute"].description is not None
    assert f"{retraction_rate.RETRACTION_WINDOW_SECONDS:g} s" in (
        api_spec.ProtectionSpec.model_fields["max_retractions_per_minute"].description
    )
    assert metric_names.TOKEN_USAGE in (
        api_spec.ProtectionSpec.model_fields["target_token_usage"].description or ""
    )


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
    engine_roles = roles(spec)
    assert engine_roles, f"{example} renders no engine roles"
    for role in engine_roles:
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
