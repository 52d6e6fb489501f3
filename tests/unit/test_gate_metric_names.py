"""The gate's metric names, types and labels are an interface (the operator and dashboards read them)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvant_contracts.limits import Limits
from kvant_contracts.serving_pod import GATE_BUSY_REASONS
from kvant_contracts.tenancy import OTHER_TENANTS, PRIORITIES
from kvant_runtime.gate.admission import Admission
from kvant_runtime.gate.gate_metrics import GateMetrics
from kvant_runtime.gate.gate_server import METRICS_PATH
from tests.unit.gate_harness import KubeletLimitsDir, held_engine_behind_gate, run

DOCUMENTED = {
    "kvant_gate_admitted": "counter",
    "kvant_gate_rejected": "counter",
    "kvant_gate_observed_over_limit": "counter",
    "kvant_gate_queue_length": "gauge",
    "kvant_gate_queue_wait_seconds": "histogram",
    "kvant_gate_prompt_counts": "counter",
    "kvant_gate_in_flight_requests": "gauge",
    "kvant_gate_in_flight_tokens": "gauge",
    "kvant_gate_effective_concurrency": "gauge",
    "kvant_gate_token_budget": "gauge",
    "kvant_gate_demand": "gauge",
    "kvant_gate_engine_max_total_num_tokens": "gauge",
    "kvant_gate_configured_limit": "gauge",
    "kvant_gate_mode": "gauge",
    "kvant_gate_concurrency_changes": "counter",
    "kvant_gate_limits_reloads": "counter",
    "kvant_gate_limits_valid": "gauge",
    "kvant_gate_limits_source": "gauge",
    "kvant_gate_engine_metrics_stale": "gauge",
    "kvant_gate_engine_token_usage": "gauge",
    "kvant_gate_output_forecast_tokens": "gauge",
    "kvant_gate_output_forecast_margin_tokens": "gauge",
    "kvant_gate_output_forecast_widen": "gauge",
    "kvant_gate_prompt_tokenizer_exact": "gauge",
    "kvant_gate_prompt_estimate_scale": "gauge",
    "kvant_gate_tenant_admitted_tokens": "counter",
    "kvant_gate_tenant_rejected": "counter",
    "kvant_gate_tenant_queued": "gauge",
}


def test_gate_exports_exactly_the_documented_metrics(tmp_path):
    async def scenario() -> None:
        limits = KubeletLimitsDir(tmp_path)
        limits.write({"maxConcurrency": 12, "targetTokenUsage": 0.8})
        async with (
            held_engine_behind_gate(limits) as (_engine, _gate, url, session),
            session.get(url + METRICS_PATH) as resp,
        ):
            assert resp.status == 200
            families = {f.name: f for f in text_string_to_metric_families(await resp.text())}
        # prometheus-client's `*_created` timestamps come with every counter and histogram.
        exported = {name: f.type for name, f in families.items() if not name.endswith("_created")}
        assert exported == DOCUMENTED
        configured = {s.labels["field"]: s.value for s in families["kvant_gate_configured_limit"].samples}
        assert configured["maxConcurrency"] == 12
        assert configured["targetTokenUsage"] == 0.8
        assert configured["concurrency.min"] == 1  # the contract's default floor
        modes = {s.labels["mode"]: s.value for s in families["kvant_gate_mode"].samples}
        assert modes == {"enforce": 1.0, "observe": 0.0, "off": 0.0}

    run(scenario())


def test_the_per_tenant_series_a_query_needs_exist_at_zero_from_the_start():
    # Dashboards and alerts take rates over "other"'s refusals and admitted tokens: absent series would
    # make those queries return nothing instead of 0 on a gate that has not yet seen such a request.
    text = generate_latest(GateMetrics(Admission(Limits())).registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    rejected = {
        (s.labels["tenant"], s.labels["priority"], s.labels["reason"]): s.value
        for s in families["kvant_gate_tenant_rejected"].samples
        if s.name.endswith("_total")
    }
    assert rejected == {
        (OTHER_TENANTS, priority, reason): 0.0 for priority in PRIORITIES for reason in GATE_BUSY_REASONS
    }
    admitted = {
        (s.labels["tenant"], s.labels["priority"]): s.value
        for s in families["kvant_gate_tenant_admitted_tokens"].samples
        if s.name.endswith("_total")
    }
    assert admitted == {(OTHER_TENANTS, priority): 0.0 for priority in PRIORITIES}
