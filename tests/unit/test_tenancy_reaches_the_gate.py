"""spec.tenancy reaches the gate through the limits ConfigMap (read back by the gate's own parser),
edits no pod template, and a model without tenancy renders the limits it rendered before."""

from __future__ import annotations

import pytest

from kvant_contracts.limits import LIMITS_FILE, parse_limits_text
from kvant_contracts.tenancy import Tenancy, Tenant
from kvant_operator.render.limits_configmap import limits_configmap
from tests.unit.render_inputs import body, spec_of
from tests.unit.test_render_limits_edit_leaves_pods_alone import _deployment

TENANCY = {
    "defaultPriority": "sheddable",
    "tenants": [
        {"name": "acme", "priority": "critical", "weight": 2, "tokensPerMinute": 60000},
        {"name": "bulk"},
    ],
    "criticalReserve": 0.3,
}


def _gate_reads(manifest: dict) -> Tenancy:
    text = limits_configmap(manifest, spec_of(manifest), None)["data"][LIMITS_FILE]
    return parse_limits_text(text, "limits.yaml").tenancy


def test_the_gate_reads_the_specs_tenancy() -> None:
    tenancy = _gate_reads(body(tenancy=TENANCY))
    assert tenancy.defaultPriority == "sheddable" and tenancy.criticalReserve == pytest.approx(0.3)
    assert tenancy.tenants == (
        Tenant("acme", "critical", 2.0, 60000),
        Tenant("bulk", "sheddable", 1.0, None),  # no class of its own: the default class
    )


def test_no_tenancy_renders_the_limits_file_as_before() -> None:
    manifest = body()
    text = limits_configmap(manifest, spec_of(manifest), None)["data"][LIMITS_FILE]
    assert "tenancy" not in text  # existing models' ConfigMaps do not change on upgrade
    assert _gate_reads(manifest) == Tenancy()


def test_a_tenancy_edit_changes_no_pod_template() -> None:
    assert _deployment(body()) == _deployment(body(tenancy=TENANCY))
