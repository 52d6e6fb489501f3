"""`kvant status`'s view: a replica's numbers read from a pod's merged metrics, and the screen it
prints for a model (the command itself runs against the local cluster in an e2e test)."""

from __future__ import annotations

import json

from kvant_operator.oncall.status_text import render_text, sparkline
from kvant_operator.oncall.status_view import ModelStatus, model_status, replica_from_metrics

MERGED = """\
# TYPE kvant_gate_rejected_total counter
kvant_gate_rejected_total{reason="queue_full"} 3.0
kvant_gate_rejected_total{reason="queue_timeout"} 2.0
kvant_gate_rejected_total{reason="bad_request"} 7.0
# TYPE kvant_gate_queue_length gauge
kvant_gate_queue_length 4.0
# TYPE kvant_gate_effective_concurrency gauge
kvant_gate_effective_concurrency 12.0
# TYPE sglang:token_usage gauge
sglang:token_usage{tp_rank="0"} 0.81
sglang:token_usage{tp_rank="1"} 0.86
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{tp_rank="0"} 6.0
sglang:num_running_reqs{tp_rank="1"} 6.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{tp_rank="0"} 1.0
"""

QM = {
    "metadata": {"name": "tiny", "namespace": "team-a", "generation": 4},
    "spec": {
        "limits": {"maxConcurrency": 16, "maxQueued": 32, "queueTimeoutSeconds": 10},
        "protection": {"targetTokenUsage": 0.85, "concurrency": {"min": 2}},
    },
    "status": {
        "phase": "Ready",
        "observedGeneration": 4,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Serving"},
            {"type": "CacheProtected", "status": "False", "reason": "KVPressure"},
        ],
        "protection": {"effectiveConcurrency": 12, "lastDecision": "token_usage 0.91 > 0.85; 16 → 12"},
    },
}


def test_a_replica_reads_the_worst_rank_and_counts_only_busy_refusals() -> None:
    replica = replica_from_metrics("tiny-abc", MERGED)
    assert replica.token_usage == 0.86  # the worst TP rank
    # The TP ranks of one scheduler run the same batch: counted once, not summed.
    assert (replica.running, replica.queued_engine) == (6.0, 1.0)
    assert replica.turned_away == 5.0  # 429s, not the 400
    assert (replica.queued_gate, replica.concurrency) == (4.0, 12.0)
    assert replica.retracted == 0.0  # no counter yet: nothing retracted


def test_the_screen_says_what_on_call_needs() -> None:
    view = model_status(QM)
    view.replicas = [replica_from_metrics("tiny-abc", MERGED)]
    view.usage_history = [0.2, 0.5, 0.9, 0.86]
    text = render_text(view)
    assert text.splitlines()[0] == "team-a/tiny  phase Ready  generation 4"
    assert "CacheProtected=False KVPressure" in text
    assert "effective concurrency 12 (maxConcurrency 16, protection 2..16" in text
    assert "last decision: token_usage 0.91 > 0.85; 16 → 12" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("tiny-abc"))
    assert row.split() == ["tiny-abc", "0.86", "6", "1", "0", "5", "4", "12"]
    assert "kv usage, last 15 min: ▂▅█▇  (max 0.90)" in text
    assert view.to_json()["replicas"][0]["turned_away"] == 5.0


def test_sparkline_spans_zero_to_one() -> None:
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"


def _autoscaled(autoscaling: dict) -> dict:
    return {**QM, "status": {**QM["status"], "autoscaling": autoscaling}}


def test_an_autoscaled_model_shows_its_autoscaler_at_its_limit() -> None:
    view = model_status(
        _autoscaled(
            {
                "minReplicas": 1,
                "maxReplicas": 3,
                "currentReplicas": 3,
                "desiredReplicas": 3,
                "lastScaleTime": "2026-11-30T14:02:11Z",
                "reason": "TooManyReplicas",
                "message": "the desired replica count is more than the maximum replica count",
            }
        )
    )
    lines = render_text(view).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  autoscaling:"))
    assert lines[at] == (
        "  autoscaling: 3 replicas (desired 3, min 1, max 3) — TooManyReplicas; "
        "last scaled 2026-11-30T14:02:11Z"
    )
    assert lines[at + 1] == "    the desired replica count is more than the maximum replica count"
    assert view.to_json()["autoscaling"]["maxReplicas"] == 3


def test_an_autoscaler_that_never_scaled_or_is_missing_says_so() -> None:
    missing = {
        "minReplicas": 1,
        "maxReplicas": 4,
        "currentReplicas": 1,
        "desiredReplicas": 0,
        "lastScaleTime": None,
        "reason": "MetricsUnavailable",
        "message": "the cluster's custom metrics API does not serve the demand",
    }
    text = render_text(model_status(_autoscaled(missing)))
    assert "  autoscaling: 1 replica (desired 0, min 1, max 4) — MetricsUnavailable; not scaled yet" in text
    assert "    the cluster's custom metrics API does not serve the demand" in text


def test_a_model_without_autoscaling_shows_no_autoscaler() -> None:
    view = model_status(QM)
    assert view.autoscaling is None and view.to_json()["autoscaling"] is None
    assert "autoscaling:" not in render_text(view)


# Two replicas' gates with tenant series, as prometheus_client exposes them (counters' `_created`
# lines included). Each gate names its own top tenants: "batch" is "other" on the second.
TENANTS_A = """\
# HELP kvant_gate_tenant_admitted_tokens_total KV tokens admitted.
# TYPE kvant_gate_tenant_admitted_tokens_total counter
kvant_gate_tenant_admitted_tokens_total{priority="critical",tenant="checkout"} 12000.0
kvant_gate_tenant_admitted_tokens_total{priority="sheddable",tenant="batch"} 90000.0
kvant_gate_tenant_admitted_tokens_total{priority="standard",tenant="default"} 3000.0
kvant_gate_tenant_admitted_tokens_created{priority="critical",tenant="checkout"} 1.7e9
# HELP kvant_gate_tenant_rejected_total Requests the gate answered itself.
# TYPE kvant_gate_tenant_rejected_total counter
kvant_gate_tenant_rejected_total{priority="sheddable",reason="queue_full",tenant="batch"} 40.0
kvant_gate_tenant_rejected_total{priority="sheddable",reason="evicted",tenant="batch"} 5.0
kvant_gate_tenant_rejected_total{priority="critical",reason="queue_full",tenant="other"} 0.0
kvant_gate_tenant_rejected_created{priority="sheddable",reason="queue_full",tenant="batch"} 1.7e9
# HELP kvant_gate_tenant_queued Requests waiting in the gate's queue.
# TYPE kvant_gate_tenant_queued gauge
kvant_gate_tenant_queued{priority="critical",tenant="checkout"} 0.0
kvant_gate_tenant_queued{priority="sheddable",tenant="batch"} 7.0
kvant_gate_tenant_queued{priority="critical",tenant="other"} 0.0
kvant_gate_tenant_queued{priority="standard",tenant="other"} 0.0
kvant_gate_tenant_queued{priority="sheddable",tenant="other"} 0.0
"""
TENANTS_B = """\
# TYPE kvant_gate_tenant_admitted_tokens_total counter
kvant_gate_tenant_admitted_tokens_total{priority="critical",tenant="checkout"} 8000.0
kvant_gate_tenant_admitted_tokens_total{priority="sheddable",tenant="other"} 500.0
# TYPE kvant_gate_tenant_rejected_total counter
kvant_gate_tenant_rejected_total{priority="critical",reason="queue_timeout",tenant="checkout"} 2.0
kvant_gate_tenant_rejected_total{priority="critical",reason="tenant_rate",tenant="checkout"} 1.0
kvant_gate_tenant_rejected_total{priority="sheddable",reason="queue_full",tenant="other"} 4.0
# TYPE kvant_gate_tenant_queued gauge
kvant_gate_tenant_queued{priority="critical",tenant="checkout"} 1.0
"""


def _with_tenants() -> ModelStatus:
    view = model_status(QM)
    view.replicas = [
        replica_from_metrics("tiny-abc", MERGED + TENANTS_A),
        replica_from_metrics("tiny-def", MERGED + TENANTS_B),
    ]
    return view


def test_the_tenants_are_summed_over_the_replicas_most_refused_first() -> None:
    shown = _with_tenants().tenants
    assert [(t.tenant, t.priority) for t in shown] == [
        ("batch", "sheddable"),  # 45 refused
        ("other", "sheddable"),  # 4 refused
        ("checkout", "critical"),  # 3 refused, the most admitted tokens
        ("default", "standard"),  # none refused
    ]  # the gates' series at 0 (other, critical and standard) are left out
    checkout = shown[2]
    assert (checkout.admitted_tokens, checkout.queued) == (20000.0, 1.0)
    assert checkout.refused == {"queue_timeout": 2.0, "tenant_rate": 1.0}


def test_the_screen_shows_the_tenants_and_their_refusals_by_reason() -> None:
    lines = render_text(_with_tenants()).splitlines()
    at = lines.index("  tenants, summed over the replicas (top by refused, then admitted):")
    assert lines[at + 1].split() == ["tenant", "class", "admitted", "tokens", "queued", "refused"]
    assert lines[at + 2].split() == [
        "batch",
        "sheddable",
        "90.0k",
        "7",
        "45",
        "(queue_full",
        "40,",
        "evicted",
        "5)",
    ]
    assert lines[at + 4].split() == [
        "checkout",
        "critical",
        "20.0k",
        "1",
        "3",
        "(queue_timeout",
        "2,",
        "tenant_rate",
        "1)",
    ]
    assert lines[at + 5].split() == ["default", "standard", "3.00k", "0", "0"]
    assert lines[at + 6] == "  (admitted tokens and refused: since each gate started; queued: now)"


def test_the_json_carries_the_tenants_once_for_the_model() -> None:
    data = _with_tenants().to_json()
    assert data["tenants"][0] == {
        "tenant": "batch",
        "priority": "sheddable",
        "admitted_tokens": 90000.0,
        "queued": 7.0,
        "refused": {"queue_full": 40.0, "evicted": 5.0},
        "refused_total": 45.0,
    }
    assert all("tenants" not in replica for replica in data["replicas"])
    json.dumps(data)  # still one JSON object


def test_gates_without_tenant_series_show_no_tenants() -> None:
    view = model_status(QM)
    view.replicas = [replica_from_metrics("tiny-abc", MERGED)]
    assert "tenants" not in render_text(view)
    assert view.to_json()["tenants"] == []


def test_at_most_ten_tenants_are_shown() -> None:
    text = "# TYPE kvant_gate_tenant_admitted_tokens_total counter\n" + "".join(
        f'kvant_gate_tenant_admitted_tokens_total{{priority="standard",tenant="t{i:02d}"}} {100 + i}.0\n'
        for i in range(15)
    )
    view = model_status(QM)
    view.replicas = [replica_from_metrics("tiny-abc", text)]
    assert [t.tenant for t in view.tenants] == [f"t{i:02d}" for i in range(14, 4, -1)]
    assert len(view.to_json()["tenants"]) == 10


def _in_phase(phase: str) -> dict:
    run = {
        "device": "cuda",
        "gpus": 1,
        "flops": 7.5e16,
        "etaSeconds": 378,
        "samples": 512,
        "sequenceLength": 2048,
    }
    calibration = {**run, "device": "cpu", "gpus": 0, "flops": 1.2e9, "etaSeconds": 1}
    plan = {"gptq": run, "calibration": calibration}
    return {**QM, "status": {**QM["status"], "phase": phase, "plan": plan}}


def test_a_converting_or_calibrating_model_shows_the_plans_estimate_for_that_run() -> None:
    converting = render_text(model_status(_in_phase("Converting")))
    assert "  GPTQ: on cuda, 1 GPU, estimated 6m18s (512 x 2048 tokens, 7.5e+16 FLOPs)" in converting
    calibrating = render_text(model_status(_in_phase("Calibrating")))
    assert "  calibration: on cpu, estimated 1s (512 x 2048 tokens, 1.2e+09 FLOPs)" in calibrating
    # Serving, or converting with RTN (no GPTQ run in the plan), there is no estimate to show.
    assert "estimated" not in render_text(model_status(_in_phase("Ready")))
    rtn = _in_phase("Converting")
    del rtn["status"]["plan"]["gptq"]
    assert "estimated" not in render_text(model_status(rtn))
