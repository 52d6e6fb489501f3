"""The custom metrics API serves each pod's demand: pods export the gate's series, the cluster's
Prometheus scrapes them, and the real prometheus-adapter, with Kvant's rule, answers through the
apiserver's aggregation layer what a HorizontalPodAutoscaler reads."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from kubernetes.utils import parse_quantity

from kvant_contracts.autoscaling import ADMITTED_TOTAL, DEMAND_GAUGE, DEMAND_METRIC, REJECTED_TOTAL
from kvant_contracts.kube_object import Obj
from kvant_contracts.serving_pod import GATE_BUSY_REASONS
from kvant_dev.cluster import LocalCluster
from tests.integration.workloads import pod, python_container
from tests.kube_wait import wait_for

pytestmark = pytest.mark.cluster

NAMESPACE = "custom-metrics-demand"
METRICS_PORT = 9090
# Serves Prometheus text: SERIES' gauges as they are, its counters growing at their rate per second.
METRICS_SERVER = """
import http.server, json, os, time
series = json.loads(os.environ['SERIES'])
start = time.monotonic()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        elapsed = time.monotonic() - start
        lines = [f'{name} {value}' for name, value in series['gauges'].items()]
        lines += [f'{name} {rate * elapsed}' for name, rate in series['counters'].items()]
        body = ('\\n'.join(lines) + '\\n').encode()
        self.send_response(200); self.send_header('Content-Type', 'text/plain; version=0.0.4')
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(('0.0.0.0', int(os.environ['PORT'])), Handler).serve_forever()
"""


def rejected(reason: str) -> str:
    return f'{REJECTED_TOTAL}{{reason="{reason}"}}'


def gate_pod(name: str, gauges: dict[str, float], counters: dict[str, float]) -> Obj:
    """A pod that the node agent lists for Prometheus, as it lists a serving pod's gate."""
    container = python_container(
        "gate",
        METRICS_SERVER,
        ports=[{"name": "metrics", "containerPort": METRICS_PORT}],
    )
    container["env"] += [
        {"name": "PORT", "value": str(METRICS_PORT)},
        {"name": "SERIES", "value": json.dumps({"gauges": gauges, "counters": counters})},
    ]
    obj = pod(name, container)
    obj["metadata"].update(namespace=NAMESPACE, annotations={"prometheus.io/scrape": "true"})
    return obj


def test_custom_metrics_api_serves_each_pods_demand(cluster: LocalCluster) -> None:
    cluster.start_metrics_adapter()
    # A replica at 1.5 that refuses nothing (its busy counters at 0 from the start, as the gate's are).
    steady = gate_pod(
        "steady",
        {DEMAND_GAUGE: 1.5, ADMITTED_TOTAL: 0, **{rejected(r): 0 for r in GATE_BUSY_REASONS}},
        {},
    )
    # A replica at 1.0 whose queue is full: it refuses 1 request for every 3 it admits, so a quarter
    # of what it is asked is turned away: 1.0 + 0.25. Refusals for a bad key do not count.
    refusing = gate_pod(
        "refusing",
        {DEMAND_GAUGE: 1.0, **{rejected(r): 0 for r in GATE_BUSY_REASONS[1:]}},
        {ADMITTED_TOTAL: 3.0, rejected(GATE_BUSY_REASONS[0]): 1.0, rejected("unauthorized"): 10.0},
    )
    try:
        cluster.kubectl("create", "namespace", NAMESPACE)
        for obj in (steady, refusing):
            cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))
        path = f"/apis/custom.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/pods/*/{DEMAND_METRIC}"

        def served() -> dict[str, Decimal] | None:
            result = cluster.kubectl("get", "--raw", path, check=False)
            if result.returncode != 0:
                return None
            items = json.loads(result.stdout)["items"]
            values = {item["describedObject"]["name"]: parse_quantity(item["value"]) for item in items}
            return values if set(values) == {"steady", "refusing"} else None

        # Bounded by the pods' start, two scrapes (1 s apart, for a rate) and the adapter's 5 s relist.
        values = wait_for(served, 90, f"{DEMAND_METRIC} of both pods from the custom metrics API")
        assert values["steady"] == Decimal("1.5")
        # The adapter serves milli-units, truncated: 1.25 may come back as 1.249.
        assert abs(values["refusing"] - Decimal("1.25")) <= Decimal("0.002"), values
    finally:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", "--ignore-not-found")
