"""A real Prometheus scrapes `kvant sim`, and the series carry SGLang's names and labels."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest

from kvant_dev.netutil import free_port

MODEL = "sim-scraped"
SCHEDULER_LABELS = {
    "model_name": MODEL,
    "engine_type": "unified",
    "tp_rank": "0",
    "pp_rank": "0",
    "moe_ep_rank": "0",
}


def wait_for(what: str, probe, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if result := probe():
                return result
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def generate(url: str) -> None:
    body = json.dumps({"text": "hello " * 50, "sampling_params": {"max_new_tokens": 20}}).encode()
    request = urllib.request.Request(url + "/generate", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.load(response)["meta_info"]["completion_tokens"] == 20


@pytest.mark.cluster
def test_prometheus_scrapes_sglang_series_from_the_simulator(prometheus_factory):
    port = free_port()
    command = [sys.executable, "-m", "kvant_cli.main", "sim", "--port", str(port), "--model-name", MODEL]
    sim = subprocess.Popen([*command, "--kv-tokens", "5000", "--decode-base-ms", "1"])
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for("the simulator", lambda: urllib.request.urlopen(url + "/health", timeout=1).status == 200)
        for _ in range(3):
            generate(url)
        prometheus = prometheus_factory([f"127.0.0.1:{port}"])

        def series(promql: str) -> list[dict[str, Any]]:
            result: list[dict[str, Any]] = prometheus.query(promql)
            return result

        capacity = wait_for("sglang:max_total_num_tokens", lambda: series("sglang:max_total_num_tokens"))
        assert float(capacity[0]["value"][1]) == 5000
        assert capacity[0]["metric"].items() >= SCHEDULER_LABELS.items()
        for name in ("sglang:token_usage", "sglang:num_running_reqs", "sglang:num_retracted_requests_total"):
            (sample,) = wait_for(name, lambda n=name: series(n))
            assert sample["metric"].items() >= SCHEDULER_LABELS.items()
        usage = float(series("sglang:token_usage")[0]["value"][1])
        assert 0.0 <= usage <= 1.0
        generated = wait_for("generation tokens", lambda: series("sglang:generation_tokens_total"))
        assert generated[0]["metric"]["is_streaming"] == "false"
        assert float(generated[0]["value"][1]) == 60
        ttft = wait_for("the TTFT histogram", lambda: series("sglang:time_to_first_token_seconds_count"))
        assert float(ttft[0]["value"][1]) == 3
    finally:
        sim.terminate()
        sim.wait(timeout=10)
