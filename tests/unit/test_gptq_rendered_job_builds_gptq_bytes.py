"""`spec.weights.method: gptq` is built, not only accepted: the conversion Job the operator renders
runs GPTQ with the spec's settings, on one worker, and its artifact says so and differs from RTN's.
A `gptq` block without the method is refused naming the field."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from kvant_operator.api.spec import QuantizedModelSpec
from kvant_operator.render import jobs
from kvant_operator.render.offline import render_offline
from kvant_operator.settings import OperatorSettings
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.convert_harness import kvant
from tests.unit.render_inputs import body, spec_of

GPTQ_WEIGHTS = {
    "format": "int4",
    "method": "gptq",
    "groupSize": 32,
    "gptq": {"samples": 4, "sequenceLength": 64, "dampening": 0.02, "actOrder": False},
}


def _convert_args(weights: dict[str, object], source: str) -> list[str]:
    manifest = body(source={"uri": f"file://{source}"}, weights=weights, kvCache={"dtype": "bf16"})
    job = next(
        o
        for o in render_offline(manifest, None, "team-a")
        if o["kind"] == "Job" and o["metadata"]["labels"]["app.kubernetes.io/component"] == "artifact"
    )
    pod = job["spec"]["template"]["spec"]
    convert = next(c for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == "convert")
    return list(convert["args"])


def test_the_rendered_job_runs_gptq_with_the_specs_settings(tmp_path):
    source = tiny_checkpoint("llama", "bf16")
    args = _convert_args(GPTQ_WEIGHTS, str(source))
    for flag, value in [
        ("--method", "gptq"),
        ("--samples", "4"),
        ("--sequence-length", "64"),
        ("--damp", "0.02"),
    ]:
        assert args[args.index(flag) + 1] == value
    assert "--no-act-order" in args
    rtn_args = _convert_args({"format": "int4", "groupSize": 32}, str(source))
    assert rtn_args[rtn_args.index("--method") + 1] == "rtn" and "--samples" not in rtn_args

    outputs = {}
    for name, command in (("gptq", args), ("rtn", rtn_args)):
        command[1], command[2] = str(source), str(tmp_path / name)
        done = kvant(*command)
        assert done.returncode == 0, done.stderr
        outputs[name] = json.loads((tmp_path / name / "kvant-manifest.json").read_text())
    assert outputs["gptq"]["recipe"]["method"] == "gptq"
    assert outputs["rtn"]["recipe"]["method"] == "rtn"
    assert outputs["gptq"]["digest"] != outputs["rtn"]["digest"]


def test_gptq_converts_on_one_worker_whatever_the_source_size():
    model = body(weights=GPTQ_WEIGHTS, kvCache={"dtype": "bf16"})
    spec = spec_of(model)
    settings = OperatorSettings()
    huge = 100 * settings.conversion_bytes_per_worker
    assert jobs.conversion_workers(model, spec, huge, settings) == 1
    rtn = spec_of(body(kvCache={"dtype": "bf16"}))
    assert jobs.conversion_workers(model, rtn, huge, settings) > 1


def test_a_gptq_block_without_the_method_is_refused_naming_it():
    raw = {
        "source": {"uri": "file:///m"},
        "weights": {"format": "int4", "gptq": {"samples": 8}},
        "serving": {"gpu": {"memoryGiB": 80}},
    }
    with pytest.raises(ValidationError, match=r"spec.weights.gptq applies only to spec.weights.method: gptq"):
        QuantizedModelSpec.model_validate(raw)
