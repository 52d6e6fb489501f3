"""The limits file: CR field names, defaults, and errors that name the field."""

from __future__ import annotations

import pytest
import yaml

from kvant_contracts.limits import (
    ConcurrencyBounds,
    Limits,
    LimitsError,
    parse_limits,
    parse_limits_text,
    render_limits,
)


def test_the_documented_defaults():
    assert parse_limits({}, "limits") == Limits(
        mode="enforce",
        maxConcurrency=64,
        maxQueued=256,
        queueTimeoutSeconds=30.0,
        targetTokenUsage=0.90,
        concurrency=ConcurrencyBounds(min=1, max=128),
    )


def test_an_empty_or_cut_short_file_is_refused_not_read_as_defaults():
    with pytest.raises(LimitsError, match=r"^limits.yaml: the limits file is empty"):
        parse_limits_text("", "limits.yaml")
    whole = render_limits(parse_limits({"maxConcurrency": 3}))
    assert parse_limits_text(whole, "limits.yaml").maxConcurrency == 3
    cut = whole[: whole.index("maxQueued")]  # a writer that died half way (keys are sorted)
    with pytest.raises(LimitsError, match=r"incomplete limits file .* missing .*maxQueued"):
        parse_limits_text(cut, "limits.yaml")


def test_yaml_and_json_read_the_same():
    yaml_text = """
mode: observe
maxConcurrency: 48
maxQueued: 10
queueTimeoutSeconds: 2.5
targetTokenUsage: 0.8
concurrency: {min: 2, max: 96}
"""
    json_text = (
        '{"mode": "observe", "maxConcurrency": 48, "maxQueued": 10, "queueTimeoutSeconds": 2.5,'
        ' "targetTokenUsage": 0.8, "concurrency": {"min": 2, "max": 96}}'
    )
    from_yaml = parse_limits(yaml.safe_load(yaml_text), "limits.yaml")
    assert from_yaml == parse_limits(yaml.safe_load(json_text), "limits.json")
    assert from_yaml.mode == "observe"
    assert from_yaml.maxConcurrency == 48
    assert from_yaml.concurrency == ConcurrencyBounds(min=2, max=96)


def test_max_concurrency_caps_the_local_loop_range():
    limits = parse_limits({"maxConcurrency": 3, "concurrency": {"min": 4, "max": 128}})
    assert limits.concurrency_ceiling == 3
    assert limits.concurrency_floor == 3
    roomy = parse_limits({"maxConcurrency": 64, "concurrency": {"min": 4, "max": 32}})
    assert (roomy.concurrency_floor, roomy.concurrency_ceiling) == (4, 32)


@pytest.mark.parametrize(
    ("document", "names"),
    [
        ({"maxConcurency": 3}, ["maxConcurency", "valid fields are", "maxConcurrency"]),
        ({"mode": "enforcing"}, ["mode", "enforce, observe, off", "'enforcing'"]),
        ({"maxQueued": True}, ["maxQueued", "must be a number"]),
        ({"maxConcurrency": 0}, ["maxConcurrency", "≥ 1", "0"]),
        ({"maxConcurrency": 2.5}, ["maxConcurrency", "whole number"]),
        ({"targetTokenUsage": 90}, ["targetTokenUsage", "(0, 1]", "90"]),
        ({"queueTimeoutSeconds": 0}, ["queueTimeoutSeconds", "above 0"]),
        ({"concurrency": {"min": 10, "max": 5}}, ["concurrency.min", "concurrency.max (5)"]),
        ({"concurrency": {"minimum": 1}}, ["concurrency.minimum", "concurrency.min"]),
        ({"concurrency": {"decreaseFactor": 1}}, ["concurrency.decreaseFactor", "below 1"]),
        ({"concurrency": [1, 2]}, ["concurrency must be a mapping"]),
        ([1, 2], ["the document must be a mapping"]),
    ],
)
def test_invalid_documents_are_rejected_naming_the_field(document, names):
    with pytest.raises(LimitsError) as raised:
        parse_limits(document, "/etc/kvant/limits.yaml")
    message = str(raised.value)
    assert message.startswith("/etc/kvant/limits.yaml: ")
    for name in names:
        assert name in message


def test_text_that_is_not_yaml_is_rejected_with_the_file_named():
    with pytest.raises(LimitsError, match=r"^limits.yaml: not valid YAML or JSON"):
        parse_limits_text("maxConcurrency: [1,", "limits.yaml")
