"""The limits document's `tenancy`: optional, validated with errors that name the field down to the
tenant's index, and rendered only when it is not the single default tenant."""

from __future__ import annotations

import pytest

from kvant_contracts.limits import (
    FILE_FIELDS,
    Limits,
    LimitsError,
    parse_limits,
    parse_limits_text,
    render_limits,
)
from kvant_contracts.tenancy import PRIORITIES, Tenancy, Tenant


def test_a_document_without_tenancy_is_one_default_tenant() -> None:
    assert "tenancy" not in FILE_FIELDS  # optional even in a file the operator wrote
    assert parse_limits({}).tenancy == Tenancy()
    assert PRIORITIES == ("critical", "standard", "sheddable")
    # The default is not written, so every limits file rendered before tenancy existed reads the same.
    text = render_limits(Limits())
    assert "tenancy" not in text
    assert parse_limits_text(text, "limits.yaml") == Limits()


def test_tenants_parse_and_round_trip_through_the_rendered_file() -> None:
    limits = parse_limits(
        {
            "tenancy": {
                "defaultPriority": "sheddable",
                "outputTokenWeight": 3,
                "sheddableQueueShare": 0.25,
                "criticalReserve": 0,
                "tenants": [
                    {"name": "search", "priority": "critical", "weight": 2, "tokensPerMinute": 60000},
                    {"name": "batch", "weight": 0.5},  # no class named: the document's default
                ],
            }
        }
    )
    assert limits.tenancy == Tenancy(
        defaultPriority="sheddable",
        tenants=(
            Tenant("search", "critical", 2.0, 60000),
            Tenant("batch", "sheddable", 0.5, None),
        ),
        outputTokenWeight=3.0,
        sheddableQueueShare=0.25,
        criticalReserve=0.0,
    )
    assert limits.tenancy.priority_of("search") == "critical"
    assert limits.tenancy.priority_of("someone-else") == "sheddable"
    assert limits.tenancy.priority_of("search", "standard") == "standard"  # an explicit class wins
    assert parse_limits_text(render_limits(limits), "limits.yaml") == limits


@pytest.mark.parametrize(
    ("tenancy", "names"),
    [
        (
            {"tenants": [{"name": "a"}, {"name": "b"}, {"name": "c", "priority": "urgent"}]},
            ["tenancy.tenants[2].priority", "must be one of critical, standard, sheddable", "'urgent'"],
        ),
        ({"defaultPriority": "high"}, ["tenancy.defaultPriority", "critical, standard, sheddable"]),
        ({"tenants": [{"name": "a", "weight": 0}]}, ["tenancy.tenants[0].weight", "above 0"]),
        ({"tenants": [{"name": "a", "weight": "x"}]}, ["tenancy.tenants[0].weight", "must be a number"]),
        ({"tenants": [{"name": "a", "tokensPerMinute": 0}]}, ["tenancy.tenants[0].tokensPerMinute", "≥ 1"]),
        ({"tenants": [{"name": "a", "tokensPerMinute": 1.5}]}, ["tenancy.tenants[0].tokensPerMinute"]),
        ({"tenants": [{"weight": 1}]}, ["tenancy.tenants[0].name", "required"]),
        ({"tenants": [{"name": "has space"}]}, ["tenancy.tenants[0].name", "letters, digits"]),
        ({"tenants": [{"name": "other"}]}, ["tenancy.tenants[0].name", "'other'"]),
        ({"tenants": [{"name": "a"}, {"name": "a"}]}, ["tenancy.tenants[1].name", "unique"]),
        (
            {"tenants": [{"name": "a", "prio": "critical"}]},
            ["tenancy.tenants[0].prio", "tenancy.tenants[0].priority"],
        ),
        ({"tenants": ["a"]}, ["tenancy.tenants[0] must be a mapping"]),
        ({"tenants": {"name": "a"}}, ["tenancy.tenants", "must be a list"]),
        ({"outputTokenWeight": -1}, ["tenancy.outputTokenWeight", "above 0"]),
        ({"sheddableQueueShare": 1.5}, ["tenancy.sheddableQueueShare", "[0, 1]"]),
        ({"criticalReserve": -0.1}, ["tenancy.criticalReserve", "[0, 1]"]),
        ({"fairness": "vtc"}, ["tenancy.fairness", "valid fields are", "tenancy.tenants"]),
        ("on", ["tenancy must be a mapping"]),
    ],
)
def test_bad_tenancy_documents_name_the_field(tenancy: object, names: list[str]) -> None:
    with pytest.raises(LimitsError) as raised:
        parse_limits({"tenancy": tenancy}, "/etc/kvant/limits.yaml")
    message = str(raised.value)
    assert message.startswith("/etc/kvant/limits.yaml: ")
    for name in names:
        assert name in message
