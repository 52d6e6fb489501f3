"""The operator's rendered launch spec is exactly what `kvant launch` accepts (the contract between them)."""

from __future__ import annotations

import json

import pytest

from kvant_contracts.launch_spec import parse_spec_json
from kvant_operator.render.engine_priority import priority_flags
from kvant_operator.render.roles import roles
from kvant_operator.render.serving import ServingInputs, deployment
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import Location
from tests.unit.render_inputs import body, plan, spec_of

MODEL_DIR = Location(
    {"name": "artifacts", "persistentVolumeClaim": {"claimName": "kvant-artifacts"}},
    "/artifacts",
    "kimi-k2/abc",
)


@pytest.mark.parametrize(
    "example", ["kimi-k2-int4-experts-fp8kv-8xh200.yaml", "llama-70b-prefill-decode-fp8kv.yaml"]
)
def test_each_role_renders_a_launch_spec_the_launcher_parses(example: str) -> None:
    manifest = body(example)
    spec = spec_of(manifest)
    inputs = ServingInputs(manifest, spec, plan(), MODEL_DIR, "sha256:abc", OperatorSettings())
    engine_roles = roles(spec)
    assert engine_roles, f"{example} renders no engine roles"
    for role in engine_roles:
        engine = deployment(inputs, role)["spec"]["template"]["spec"]["containers"][0]
        assert engine["args"][:2] == ["launch", "--spec-json"]
        launch = parse_spec_json(engine["args"][2])
        assert launch.modelPath == "/artifacts/kimi-k2/abc"
        assert launch.kvCacheDtype == role.kv_cache_dtype.value
        assert launch.maxTotalTokens == plan().kv_tokens_per_replica
        assert launch.disaggregationRole == (None if role.name == "serve" else role.name)
        # Kvant's own flags (priority scheduling, render/engine_priority.py), then the model's, unchanged.
        own = priority_flags(spec.serving.priority_scheduling, role.engine_args)
        assert json.loads(engine["args"][2])["engineArgs"] == [*own, *role.engine_args]
        assert spec.serving.gpu is not None
        gpus = engine["resources"]["limits"][spec.serving.gpu.resource]
        assert gpus == str(spec.serving.gpu.count)
