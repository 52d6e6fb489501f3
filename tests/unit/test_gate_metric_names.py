"""The gate's metric names, types and labels are an interface (the operator and dashboards read them)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from kvant_runtime.gate.gate_server import METRICS_PATH
from tests.unit.gate_harness import KubeletLimitsDir, held_engine_behind_gate, run

DOCUMENTED = {
    "kvant_gate_admitted": "counter",
    "kvant_gate_rejected": "counter",
    "kvant_gate_observed_over_limit": "counter",
    "kvant_gate_queue_length": "gauge",
    "kvant_gate_queue_wait_seconds": "histogram",
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
