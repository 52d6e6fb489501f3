"""Every PromQL expression of the Grafana dashboard and of the alert rules runs against a real
Prometheus scraping a serving model (and the operator), and returns series.

Dashboard queries run with their template variables filled in. An alert's expression returns series
only while it fires, so each runs with its comparisons turned into `bool` comparisons (0 or 1 per
matched series) and `absent(X)` into `X`: what is checked is that every metric, label and join it
names exists as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.kube_wait import wait_for

from e2e.capacity import MEM_FRACTION, TINY_BYTES_PER_TOKEN, gpu_memory_for_tokens
from e2e.qm import apply, service_url, wait_ready
from kvant_dev.loadgen import LoadShape, generate_load
from kvant_dev.prometheus import Prometheus, pod_discovery_job, static_job

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

FILES = Path(__file__).resolve().parents[1] / "charts" / "kvant" / "files"
MODEL = "watched-dash"
LOAD = LoadShape(
    clients=4,
    seconds=4,
    prompt_tokens=100,
    new_tokens=20,
    slo_seconds=10,
    bytes_per_token=TINY_BYTES_PER_TOKEN,
)
_COMPARISON = re.compile(r" (>=|<=|==|!=|>|<) ")


def dashboard_queries(namespace: str, model: str = MODEL) -> list[str]:
    dashboard = json.loads((FILES / "kvant-dashboard.json").read_text())
    values = {"$namespace": namespace, "$model": model, "$__rate_interval": "1m"}
    queries = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in values.items():
                expr = expr.replace(name, value)
            queries.append(expr)
    return queries


def alert_queries() -> list[tuple[str, str]]:
    rules = yaml.safe_load((FILES / "kvant-alerts.yaml").read_text())
    queries = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            expr = _COMPARISON.sub(lambda m: f" {m.group(1)} bool ", " ".join(rule["expr"].split()))
            expr = re.sub(r"absent\((.*)\)", r"\1", expr)
            queries.append((rule["alert"], expr))
    return queries


def kvant_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "kvant_cli.main", *args]


def _check_kvant_status(cluster: Any, namespace: str, prometheus_url: str) -> None:
    """`kvant status` on the same model: its JSON and its screen."""
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    args = ["status", MODEL, "-n", namespace, "--prometheus", prometheus_url]
    listed = subprocess.run(
        [*kvant_command(*args, "--json")], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    view = json.loads(listed.stdout)
    assert view["phase"] == "Ready" and view["replicas"], view
    replica = view["replicas"][0]
    assert replica["error"] is None and replica["token_usage"] is not None and replica["concurrency"]
    screen = subprocess.run(
        kvant_command(*args), capture_output=True, text=True, env=env, timeout=60, check=True
    )
    assert screen.stdout.startswith(f"{namespace}/{MODEL}  phase Ready"), screen.stdout
    assert replica["pod"] in screen.stdout


def _answers(prometheus: Prometheus, expr: str) -> Callable[[], list[dict[str, Any]] | None]:
    return lambda: prometheus.query(expr) or None


def test_every_dashboard_and_alert_query_returns_series(
    cluster, operator, namespace, tiny_model, tiny_checkpoint, tmp_path
):
    prometheus = Prometheus(
        cluster.toolchain.prometheus,
        tmp_path / "prometheus",
        [
            pod_discovery_job(cluster.prometheus_targets),
            static_job("kvant-operator", [f"127.0.0.1:{operator.metrics_port}"]),
        ],
    )
    prometheus.start()
    try:
        apply(
            cluster,
            namespace,
            tiny_model(
                MODEL,
                kvCache={"dtype": "bf16"},
                serving={
                    "engine": "simulator",
                    "memFractionStatic": MEM_FRACTION,
                    "gpu": {"memoryGiB": gpu_memory_for_tokens(tiny_checkpoint, 4096)},
                },
                protection={"mode": "enforce", "concurrency": {"min": 1}, "metrics": {"intervalSeconds": 2}},
                # Bounds of one: the replicas panel and the at-max alert have series, with no second
                # replica (no custom metrics API runs here: the HPA reports MetricsUnavailable).
                autoscaling={"minReplicas": 1, "maxReplicas": 1},
            ),
        )
        wait_ready(cluster, namespace, MODEL)
        generate_load(service_url(cluster, namespace, MODEL), LOAD)

        _check_kvant_status(cluster, namespace, prometheus.url)

        queries = [(f"dashboard: {q}", q) for q in dashboard_queries(namespace)]
        queries += [(f"alert {name}: {q}", q) for name, q in alert_queries()]
        for what, expr in queries:
            wait_for(_answers(prometheus, expr), 120, what)
    finally:
        prometheus.stop()
