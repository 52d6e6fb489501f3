"""kvant_contracts.prometheus_text reads a serving pod's merged page (the gate's prometheus_client
exposition, then the engine's) as each of its readers expects: names as exposed (`_total`, `_bucket`,
`_sum`, `_count`), labels whatever their values hold, None or 0.0 for what is not there, and a clear
error naming the line of a page the parser refuses."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kvant_contracts.prometheus_text import ExpositionError, Sample, samples, total, value

ENGINE_PAGE = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="team a, chat {v2}",tp_rank="0",dp_rank="0",priority="1"} 3.0
sglang:num_running_reqs{model_name="team a, chat {v2}",tp_rank="0",dp_rank="1",priority=""} 2.0
# HELP sglang:num_retracted_requests_total Retractions.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="team a, chat {v2}",dp_rank="0"} 7.0
sglang:num_retracted_requests_total{model_name="team a, chat {v2}",dp_rank="1"} 5
"""


def gate_page() -> str:
    registry = CollectorRegistry()
    Counter("kvant_gate_admitted", "Requests admitted.", registry=registry).inc(4)
    rejected = Counter(
        "kvant_gate_tenant_rejected", "Refusals.", ["tenant", "priority", "reason"], registry=registry
    )
    rejected.labels("acme, inc", "batch", "queue full").inc(2)
    rejected.labels('say "hi"', "interactive", "deadline").inc(1)
    rejected.labels("other", "batch", "queue full").inc(0)
    limit = Gauge("kvant_gate_configured_limit", "Limits.", ["field"], registry=registry)
    limit.labels("maxConcurrency").set(8)
    limit.labels("maxQueued").set(32)
    Gauge("kvant_gate_queue_length", "Queued.", registry=registry).set(0)
    wait = Histogram("kvant_gate_queue_wait_seconds", "Waits.", buckets=(0.1, 1.0), registry=registry)
    wait.observe(0.05)
    wait.observe(0.5)
    return generate_latest(registry).decode()


def merged_page() -> str:
    """As the gate's metrics port serves it: its own page, then the engine's."""
    return gate_page().rstrip("\n") + "\n" + ENGINE_PAGE


def test_a_counter_reads_under_its_exposed_name_with_total() -> None:
    page = merged_page()
    assert value(page, "kvant_gate_admitted_total") == 4.0
    assert value(page, "kvant_gate_admitted") is None  # the family's name is no sample's
    assert value(page, "kvant_gate_admitted_created") is not None  # prometheus_client's own sample


def test_a_gauge_reads_by_its_labels() -> None:
    page = merged_page()
    assert value(page, "kvant_gate_configured_limit", field="maxConcurrency") == 8.0
    assert value(page, "kvant_gate_configured_limit", field="maxQueued") == 32.0
    assert value(page, "kvant_gate_queue_length") == 0.0
    assert total(page, "kvant_gate_configured_limit") == 40.0


def test_label_values_with_spaces_commas_braces_and_quotes_read_whole() -> None:
    page = merged_page()
    refused = {
        (s.labels["tenant"], s.labels["reason"]): s.value
        for s in samples(page, "kvant_gate_tenant_rejected_total")
    }
    assert refused == {
        ("acme, inc", "queue full"): 2.0,
        ('say "hi"', "deadline"): 1.0,
        ("other", "queue full"): 0.0,
    }
    assert total(page, "kvant_gate_tenant_rejected_total", priority="batch") == 2.0
    running = samples(page, "sglang:num_running_reqs")
    assert [s.labels["model_name"] for s in running] == ["team a, chat {v2}"] * 2
    assert value(page, "sglang:num_running_reqs", priority="1") == 3.0


def test_a_histogram_reads_as_bucket_sum_and_count() -> None:
    page = merged_page()
    buckets = {s.labels["le"]: s.value for s in samples(page, "kvant_gate_queue_wait_seconds_bucket")}
    assert buckets == {"0.1": 1.0, "1.0": 2.0, "+Inf": 2.0}
    assert value(page, "kvant_gate_queue_wait_seconds_count") == 2.0
    assert value(page, "kvant_gate_queue_wait_seconds_sum") == pytest.approx(0.55)
    assert value(page, "kvant_gate_queue_wait_seconds") is None


def test_the_engine_part_of_a_merged_page_reads_with_its_labels_and_float_values() -> None:
    name, model = "sglang:num_retracted_requests_total", "team a, chat {v2}"
    retracted = samples(merged_page(), name)
    assert retracted == [
        Sample(name, {"model_name": model, "dp_rank": "0"}, 7.0),
        Sample(name, {"model_name": model, "dp_rank": "1"}, 5.0),
    ]
    assert all(type(s.value) is float for s in retracted)  # "5" too: the parser alone gives an int


def test_what_is_not_there_is_none_or_zero() -> None:
    page = merged_page()
    assert value(page, "kvant_gate_in_flight_requests") is None
    assert value(page, "kvant_gate_configured_limit", field="defaultMaxTokens") is None
    assert total(page, "kvant_gate_in_flight_requests") == 0.0
    assert total(page, "kvant_gate_tenant_rejected_total", tenant="nobody") == 0.0
    assert samples(page, "kvant_gate_in_flight_requests") == []
    assert samples("") == [] and value("", "kvant_gate_queue_length") is None


def test_a_label_may_be_called_name() -> None:
    page = 'kvant_x{name="a"} 1\nkvant_x{name="b"} 2\n'
    assert value(page, "kvant_x", name="b") == 2.0


def test_several_matching_samples_are_no_one_value() -> None:
    with pytest.raises(ValueError, match="2 samples of kvant_gate_configured_limit"):
        value(merged_page(), "kvant_gate_configured_limit")


def test_a_counter_typed_without_total_reads_with_it_as_the_parser_names_it() -> None:
    # No exporter Kvant reads writes this; the module docstring says why it would read so.
    assert samples("# TYPE kvant_x counter\nkvant_x 3\n") == [Sample("kvant_x_total", {}, 3.0)]


@pytest.mark.parametrize(
    ("page", "line", "reason"),
    [
        ("kvant_a 1\nkvant_b{field} 2\n", 2, "Invalid labels"),
        ("kvant_a 1\n# TYPE kvant_b\nkvant_b 2\n", 2, "ValueError"),
        ('kvant_a 1\nkvant_b{x="1"} 2\nkvant_c one\n', 3, "could not convert string to float"),
        ('kvant_a{x="1" 2\n', 1, "could not convert"),
    ],
)
def test_a_page_the_parser_refuses_raises_naming_the_line(page: str, line: int, reason: str) -> None:
    with pytest.raises(ExpositionError, match=rf"line {line} .*{reason}") as refused:
        samples(page)
    assert isinstance(refused.value, ValueError)
    with pytest.raises(ExpositionError):
        total(page, "kvant_a")
