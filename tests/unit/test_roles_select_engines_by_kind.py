"""Engines are found by their kind label: every rendered engine pod matches the engine selector, and a
router pod of the same model does not (it must never be scraped as an engine or counted as a replica)."""

from __future__ import annotations

import pytest

from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_operator.artifact_recipe import source_location
from kvant_operator.render.roles import Role, RoleKind, engine_selector, roles
from kvant_operator.render.serving import ServingInputs, deployment
from kvant_operator.settings import OperatorSettings
from tests.unit.memory_kube import matches
from tests.unit.render_inputs import body, plan, spec_of


@pytest.mark.parametrize("example", ["tiny.yaml", "llama-70b-prefill-decode-fp8kv.yaml"])
def test_every_engine_podmatches_the_engine_selector(example: str) -> None:
    model = body(example)
    spec = spec_of(model)
    inputs = ServingInputs(model, spec, plan(), source_location(spec), "", OperatorSettings())
    name = model["metadata"]["name"]
    engine_roles = roles(spec)
    assert engine_roles, f"{example} renders no engine roles"
    for role in engine_roles:
        template = deployment(inputs, role)["spec"]["template"]["metadata"]["labels"]
        assert role.kind is RoleKind.ENGINE
        assert matches(template, engine_selector(name))


def test_a_router_pod_is_not_an_engine() -> None:
    router = Role("router", RoleKind.ROUTER, 2, KvCacheDtype.FP8_E4M3, [])
    assert not matches(router.labels("m"), engine_selector("m"))
    assert router.disaggregation is None
    assert Role("decode", RoleKind.ENGINE, 1, KvCacheDtype.FP8_E4M3, []).disaggregation == "decode"
