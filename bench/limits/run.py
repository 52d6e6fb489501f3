"""Limits edit -> every gate: how long a `spec.limits` edit takes to be in force in every gate.

A local cluster whose node agent projects ConfigMap edits as late as a kubelet does (60 s), the
operator as a local process, and one model (bf16 weights and KV: no conversion) with N replicas on
the simulator engine, the router off so every replica is a plain gate + engine pod. Once every gate
follows its limits ConfigMap through the API, the bench patches `spec.limits.maxConcurrency` E times
(a new value each time, one edit at a time) and measures, from just before the patch call:
- edit -> ConfigMap: the operator has written the new value;
- edit -> every gate: each gate's `kvant_gate_configured_limit{field="maxConcurrency"}` (read on the
  pods' metrics port) shows it, for the slowest of the N gates.
Both are polled every 20 ms, so a figure is up to ~20 ms late. It also checks that the gates' mounted
files still hold the limits from before the first edit: the API path, not the file, did it.

    python bench/limits/run.py [--replicas 3] [--edits 20]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

# Run by path, the bench has its own folder on sys.path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.cluster_models import bench_cluster, simulator_model

from kvant_contracts import prometheus_text
from kvant_contracts.limits import LIMITS_FILE
from kvant_contracts.serving_pod import METRICS_PORT
from kvant_dev.cluster import LocalCluster
from kvant_dev.netutil import free_port, http_ok, wait_until
from kvant_dev.process import ManagedProcess
from kvant_operator.render.limits_configmap import limits_name
from kvant_operator.render.roles import engine_selector

REPO = Path(__file__).resolve().parents[2]
NS, MODEL = "bench-limits", "tiny"
POLL_SECONDS = 0.02


def manifest(replicas: int) -> dict[str, Any]:
    # Router off: each replica is a plain gate + engine pod, and each gate is timed.
    return simulator_model(
        MODEL, NS, replicas, serving={"router": {"enabled": False}}, limits={"maxConcurrency": 8}
    )


def gate_metric(pod_ip: str, name: str, **labels: str) -> float | None:
    with urllib.request.urlopen(f"http://{pod_ip}:{METRICS_PORT}/metrics", timeout=5) as response:
        return prometheus_text.value(response.read().decode(), name, **labels)


def configmap_has(core: client.CoreV1Api, value: int) -> bool:
    data: str = core.read_namespaced_config_map(limits_name(MODEL), NS).data[LIMITS_FILE]
    return f"maxConcurrency: {value}\n" in data


def gate_has(pod_ip: str, value: int) -> bool:
    return gate_metric(pod_ip, "kvant_gate_configured_limit", field="maxConcurrency") == value


def until(probe: Callable[[], bool], started: float) -> float:
    """Seconds from `started` until `probe()` holds, polled every POLL_SECONDS (fails after 120 s)."""
    while not probe():
        if time.monotonic() - started > 120:
            raise TimeoutError("not reached in 120 s")
        time.sleep(POLL_SECONDS)
    return time.monotonic() - started


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 3), "p99": round(p99, 3), "max": round(ordered[-1], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--edits", type=int, default=20)
    args = parser.parse_args()
    with bench_cluster("limits", NS) as (cluster, work):
        report = run(cluster, args, work)
    print(json.dumps(report, indent=2))


def run(cluster: LocalCluster, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    health = free_port()
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "KVANT_BUSY_INTERVAL": "1"}
    argv = [sys.executable, "-m", "kvant_cli.main", "run", "--liveness", f"http://127.0.0.1:{health}/healthz"]
    operator = ManagedProcess("operator", argv, work / "operator.log", env=env)
    try:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{health}/healthz"), 60, "operator")
        custom = client.CustomObjectsApi(cluster.api_client())
        core = client.CoreV1Api(cluster.api_client())
        custom.create_namespaced_custom_object(
            "kvant.dev", "v1alpha1", NS, "quantizedmodels", manifest(args.replicas)
        )

        def gates() -> list[client.V1Pod]:
            pods = core.list_namespaced_pod(NS, label_selector=engine_selector(MODEL)).items
            running = [p for p in pods if p.status.pod_ip and p.metadata.deletion_timestamp is None]
            return running if len(running) == args.replicas else []

        def all_following_the_api() -> bool:
            pods = gates()
            try:
                return bool(pods) and all(
                    gate_metric(p.status.pod_ip, "kvant_gate_limits_source", source="api") == 1 for p in pods
                )
            except OSError:
                return False

        wait_until(all_following_the_api, 600, "every gate following its ConfigMap", operator.log_tail)
        pods = gates()
        files = [
            cluster.pod_volume(NS, p.metadata.name, p.metadata.uid, "limits") / LIMITS_FILE for p in pods
        ]
        before = [f.read_text() for f in files]
        to_configmap, to_gates = [], []
        edits_started = time.monotonic()
        with ThreadPoolExecutor(len(pods) + 1) as pool:
            for i in range(args.edits):
                value = 9 + i
                patch = {"spec": {"limits": {"maxConcurrency": value}}}
                started = time.monotonic()
                custom.patch_namespaced_custom_object(
                    "kvant.dev", "v1alpha1", NS, "quantizedmodels", MODEL, patch
                )
                written = pool.submit(until, functools.partial(configmap_has, core, value), started)
                gates_in_force = [
                    pool.submit(until, functools.partial(gate_has, p.status.pod_ip, value), started)
                    for p in pods
                ]
                to_gates.append(max(f.result() for f in gates_in_force))
                to_configmap.append(written.result())
        edits_seconds = time.monotonic() - edits_started
        files_unchanged = [f.read_text() for f in files] == before
    finally:
        operator.stop()
    return {
        "replicas": args.replicas,
        "edits": args.edits,
        "projectionDelaySeconds": cluster.projection_delay,
        "editToConfigMapSeconds": percentiles(to_configmap),
        "editToEveryGateSeconds": percentiles(to_gates),
        "secondsForAllEdits": round(edits_seconds, 1),
        "mountedFilesStillHeldTheFirstLimits": files_unchanged,
    }


if __name__ == "__main__":
    main()
