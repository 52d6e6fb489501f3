"""The gate reads SGLang's exact metric names and takes the conservative view across ranks."""

from __future__ import annotations

import pytest

from kvant_runtime.gate.engine_metrics import EngineMetricsError, parse_engine_metrics, parse_server_info

SGLANG_METRICS = """\
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m",tp_rank="0",dp_rank="0"} 0.42
sglang:token_usage{model_name="m",tp_rank="0",dp_rank="1"} 0.91
# HELP sglang:max_total_num_tokens Maximum total number of tokens.
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="m",tp_rank="0",dp_rank="0"} 1370000.0
sglang:max_total_num_tokens{model_name="m",tp_rank="0",dp_rank="1"} 1360000.0
# HELP sglang:num_retracted_requests_total Retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="m",tp_rank="0",dp_rank="0"} 3.0
sglang:num_retracted_requests_total{model_name="m",tp_rank="0",dp_rank="1"} 4.0
# HELP sglang:num_running_reqs Running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",tp_rank="0",dp_rank="0"} 12.0
"""


def test_takes_max_usage_min_capacity_and_summed_retractions():
    sample = parse_engine_metrics(SGLANG_METRICS)
    assert sample.token_usage == 0.91
    assert sample.max_total_num_tokens == 1_360_000
    assert sample.retracted_total == 7.0


def test_label_values_with_spaces_and_longer_names_do_not_confuse_it():
    text = (
        'sglang:token_usage_ratio{model_name="m"} 0.99\n'
        'sglang:token_usage{model_name="my model {v2}",tp_rank="0"} 0.25\n'
        "sglang:token_usage 0.5\n"
    )
    assert parse_engine_metrics(text).token_usage == 0.5
    with pytest.raises(EngineMetricsError, match="unreadable value"):
        parse_engine_metrics('sglang:token_usage{tp_rank="0"} high\n')


def test_capacity_and_retractions_are_optional_token_usage_is_not():
    sample = parse_engine_metrics('sglang:token_usage{tp_rank="0"} 0.5\n')
    assert (sample.token_usage, sample.retracted_total, sample.max_total_num_tokens) == (0.5, 0.0, None)
    with pytest.raises(EngineMetricsError):
        parse_engine_metrics('sglang:num_running_reqs{tp_rank="0"} 1\n')


def test_server_info_capacity_top_level_or_internal_states():
    assert parse_server_info({"max_total_num_tokens": 5000, "version": "0.5.23"}) == 5000
    assert parse_server_info({"internal_states": [{"max_total_num_tokens": 7000}, {}]}) == 7000
    assert parse_server_info({"version": "x"}) is None
    assert parse_server_info(["not", "a", "mapping"]) is None
