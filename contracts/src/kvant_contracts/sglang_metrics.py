"""SGLang's metric names, each written once, and how one engine's series add up to one number.

Everything in Kvant that reads or imitates SGLang's `/metrics` takes its names from here: the gate,
the operator's protection loop and `kvant status`, the simulator, the load generator and the benches.

How the series combine (read from SGLang 0.5.23, `sglang/srt/observability/metrics_collector.py`):
every scheduler process creates its own collector, labelled with its `tp_rank`, `pp_rank` and
`moe_ep_rank`, plus `dp_rank` when data parallelism is on (`SchedulerMetricsCollector.init_new`). The
TP (and PP/EP) ranks of one data-parallel rank run the same batch, so they count the same requests:
each of them bumps `num_retracted_requests_total` for the same retraction
(`Scheduler.update_running_batch` calls `increment_retracted_reqs` on every rank that has metrics on).
Different DP ranks schedule different requests. So an engine's total is the sum over its schedulers
(`dp_rank`), each counted once: the max over the series that share a `dp_rank`. A plain sum over all
series would count every retraction tensor-parallel-size times. The max also keeps SGLang's
per-priority breakdowns (`priority="<n>"`, beside the total under `priority=""`) from being added in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum

PREFIX = "sglang:"
# The scheduler's gauges (one series per scheduler rank).
TOKEN_USAGE = "sglang:token_usage"  # KV cache in use, 0..1, of the fullest pool
NUM_RUNNING_REQS = "sglang:num_running_reqs"
NUM_QUEUE_REQS = "sglang:num_queue_reqs"
KV_USED_TOKENS = "sglang:kv_used_tokens"
KV_AVAILABLE_TOKENS = "sglang:kv_available_tokens"
MAX_TOTAL_NUM_TOKENS = "sglang:max_total_num_tokens"  # the KV cache's capacity in tokens
NUM_RETRACTED_REQS = "sglang:num_retracted_reqs"  # retractions in the last stats interval
GEN_THROUGHPUT = "sglang:gen_throughput"
# The scheduler's counters (exposed with `_total`, as SGLang names them).
NUM_RETRACTED_REQUESTS_TOTAL = "sglang:num_retracted_requests_total"
# The tokenizer's metrics (one tokenizer per server; series differ by `is_streaming`).
PROMPT_TOKENS_TOTAL = "sglang:prompt_tokens_total"
GENERATION_TOKENS_TOTAL = "sglang:generation_tokens_total"
TIME_TO_FIRST_TOKEN_SECONDS = "sglang:time_to_first_token_seconds"
E2E_REQUEST_LATENCY_SECONDS = "sglang:e2e_request_latency_seconds"

DP_RANK = "dp_rank"
# `dp_rank="…"` inside a sample's `{…}`, for readers that scan lines instead of parsing them
# (`attn_dp_rank` does not match: the name must start the label).
_DP_RANK_LABEL = re.compile(r'(?:^|[{,\s])dp_rank="([^"]*)"')


class Combine(StrEnum):
    """How the series of one metric become the engine's one number."""

    MAX = "max"  # the fullest scheduler speaks for the engine: requests that land there suffer
    MIN = "min"  # the smallest pool bounds what one request may hold
    SUM = "sum"  # every series counts different work (the tokenizer's, by is_streaming)
    PER_SCHEDULER = "perScheduler"  # sum over dp_rank, each scheduler once (its TP/PP/EP ranks repeat it)


COMBINE: Mapping[str, Combine] = {
    TOKEN_USAGE: Combine.MAX,
    MAX_TOTAL_NUM_TOKENS: Combine.MIN,
    NUM_RUNNING_REQS: Combine.PER_SCHEDULER,
    NUM_QUEUE_REQS: Combine.PER_SCHEDULER,
    KV_USED_TOKENS: Combine.PER_SCHEDULER,
    KV_AVAILABLE_TOKENS: Combine.PER_SCHEDULER,
    NUM_RETRACTED_REQS: Combine.PER_SCHEDULER,
    GEN_THROUGHPUT: Combine.PER_SCHEDULER,
    NUM_RETRACTED_REQUESTS_TOTAL: Combine.PER_SCHEDULER,
    PROMPT_TOKENS_TOTAL: Combine.SUM,
    GENERATION_TOKENS_TOTAL: Combine.SUM,
}

# One series: the scheduler it belongs to (its dp_rank, "" without data parallelism) and its value.
Series = tuple[str, float]


def scheduler_of(labels: Mapping[str, str]) -> str:
    """The scheduler a series belongs to, from its parsed labels."""
    return labels.get(DP_RANK, "")


def scheduler_in(label_text: str) -> str:
    """The scheduler a series belongs to, from the raw `{…}` of an exposition line."""
    match = _DP_RANK_LABEL.search(label_text)
    return match[1] if match else ""


def combine(name: str, series: Iterable[Series]) -> float | None:
    """The engine's one value of `name` from its series; None when there is no series."""
    pairs = list(series)
    if not pairs:
        return None
    rule = COMBINE[name]
    values = [value for _, value in pairs]
    if rule is Combine.MAX:
        return max(values)
    if rule is Combine.MIN:
        return min(values)
    if rule is Combine.SUM:
        return sum(values)
    per_scheduler: dict[str, float] = {}
    for scheduler, value in pairs:
        per_scheduler[scheduler] = max(value, per_scheduler.get(scheduler, value))
    return sum(per_scheduler.values())


def retractions_total(series: Iterable[Series]) -> float:
    """`num_retracted_requests_total` for the engine: 0 until its first retraction creates the series."""
    return combine(NUM_RETRACTED_REQUESTS_TOTAL, series) or 0.0


def promql_per_pod(name: str, expr: str, by: str = "pod") -> str:
    """PromQL for `expr` (a query over `name`'s series) combined per `by` (a pod) as `COMBINE` says."""
    rule = COMBINE[name]
    if rule is Combine.PER_SCHEDULER:
        return f"sum by ({by}) (max by ({by}, {DP_RANK}) ({expr}))"
    return f"{rule.value} by ({by}) ({expr})"
