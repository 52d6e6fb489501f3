"""An engine's number from its series: each scheduler (dp_rank) once, its TP ranks not added up.

SGLang gives every scheduler rank its own series, and the TP ranks of one DP rank count the same
retractions; the gate, protection, `kvant status` and the load generator all combine them this way.
"""

from __future__ import annotations

from kvant_contracts.sglang_metrics import (
    MAX_TOTAL_NUM_TOKENS,
    NUM_RUNNING_REQS,
    PROMPT_TOKENS_TOTAL,
    TOKEN_USAGE,
    combine,
    promql_per_pod,
    retractions_total,
    scheduler_in,
    scheduler_of,
)
from kvant_runtime.gate.engine_metrics import parse_engine_metrics

# TP 2 x DP 2: ranks 0 and 1 serve dp_rank 0, ranks 2 and 3 serve dp_rank 1.
TP2_DP2 = """\
sglang:token_usage{model_name="m",tp_rank="0",dp_rank="0"} 0.5
sglang:token_usage{model_name="m",tp_rank="2",dp_rank="1"} 0.7
sglang:num_retracted_requests_total{model_name="m",tp_rank="0",dp_rank="0"} 3.0
sglang:num_retracted_requests_total{model_name="m",tp_rank="1",dp_rank="0"} 3.0
sglang:num_retracted_requests_total{model_name="m",tp_rank="2",dp_rank="1"} 5.0
sglang:num_retracted_requests_total{model_name="m",tp_rank="3",dp_rank="1"} 5.0
"""


def test_retractions_sum_over_dp_ranks_and_count_tp_ranks_once() -> None:
    assert retractions_total([("0", 3.0), ("0", 3.0), ("1", 5.0), ("1", 5.0)]) == 8.0
    assert retractions_total([("", 4.0), ("", 4.0)]) == 4.0  # TP only: one scheduler
    assert retractions_total([]) == 0.0  # no series until the first retraction
    assert parse_engine_metrics(TP2_DP2).retracted_total == 8.0


def test_each_name_combines_by_its_own_rule() -> None:
    assert combine(TOKEN_USAGE, [("0", 0.5), ("1", 0.7)]) == 0.7
    assert combine(MAX_TOTAL_NUM_TOKENS, [("0", 900.0), ("1", 1000.0)]) == 900.0
    # A per-priority breakdown beside its total (priority="" and "1") is not added in.
    assert combine(NUM_RUNNING_REQS, [("", 6.0), ("", 2.0)]) == 6.0
    assert combine(PROMPT_TOKENS_TOTAL, [("", 10.0), ("", 5.0)]) == 15.0  # streaming and not
    assert combine(TOKEN_USAGE, []) is None


def test_the_scheduler_comes_from_parsed_labels_or_raw_text() -> None:
    assert scheduler_of({"tp_rank": "1", "dp_rank": "3"}) == "3"
    assert scheduler_of({"tp_rank": "1"}) == ""
    assert scheduler_in('{tp_rank="1",dp_rank="3"}') == "3"
    assert scheduler_in('{attn_dp_rank="2",tp_rank="1"}') == ""


def test_promql_counts_each_scheduler_once_per_pod() -> None:
    assert promql_per_pod(NUM_RUNNING_REQS, "x") == "sum by (pod) (max by (pod, dp_rank) (x))"
    assert promql_per_pod(TOKEN_USAGE, "x") == "max by (pod) (x)"
