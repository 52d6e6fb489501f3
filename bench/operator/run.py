"""The operator at scale: N QuantizedModels with serving rendered but no pods (replicas: 0).

Every model gets a status.plan up front (computed here with the planner, as the plan Job would),
and bf16 weights + bf16 KV, so no conversion runs: the bench measures the operator itself.

Reports: time from operator start until every model is Ready, the operator's peak RSS, API requests
per minute while idle (the operator's own counter, kvant_operator_api_requests_total), and the
latency from a `kubectl patch` of spec.limits to the limits ConfigMap's change.

    python bench/operator/run.py [--models 200] [--idle-seconds 60] [--patches 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client

# Run by path, the bench has its own folder on sys.path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.cluster_models import NODE_CHECKPOINT, bench_cluster, simulator_model

from kvant_contracts import prometheus_text
from kvant_dev.cluster import LocalCluster
from kvant_dev.netutil import free_port, http_ok, wait_until
from kvant_dev.process import ManagedProcess
from kvant_operator.api.resource import QuantizedModel
from kvant_operator.hashing import digest
from kvant_operator.planner.capacity_plan import PlanRequest, make_plan
from kvant_operator.planner.checkpoint_view import load_checkpoint
from kvant_operator.render.jobs import plan_inputs

REPO = Path(__file__).resolve().parents[2]
NS = "bench"
MAX_MODELS = 1000  # one ClusterIP Service per model; the range (a /22) holds 1,021 besides `kubernetes`


def manifest(name: str) -> dict[str, Any]:
    return simulator_model(name, NS, replicas=0)  # serving objects rendered, no pods


def planned_status(body: dict[str, Any], checkpoint: Path) -> dict[str, Any]:
    spec = QuantizedModel.model_validate(body).spec
    plan = make_plan(load_checkpoint(checkpoint), PlanRequest.from_spec(spec)).to_status()
    plan = plan.model_copy(update={"inputs": digest(plan_inputs(spec))})
    return {"plan": plan.model_dump(mode="json", by_alias=True, exclude_none=True)}


def operator_metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return prometheus_text.total(response.read().decode(), name)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=MAX_MODELS)
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument("--patches", type=int, default=20)
    args = parser.parse_args()
    if args.models > MAX_MODELS:
        parser.error(
            f"--models {args.models}: the local cluster's Service range (a /22) holds {MAX_MODELS} "
            "model Services; more would never all be Ready"
        )
    with bench_cluster("operator", NS) as (cluster, work):
        checkpoint = cluster.node_path(NODE_CHECKPOINT)
        custom = client.CustomObjectsApi(cluster.api_client())
        for i in range(args.models):
            body = manifest(f"m{i:03d}")
            custom.create_namespaced_custom_object("kvant.dev", "v1alpha1", NS, "quantizedmodels", body)
            custom.patch_namespaced_custom_object_status(
                "kvant.dev",
                "v1alpha1",
                NS,
                "quantizedmodels",
                body["metadata"]["name"],
                {"status": planned_status(body, checkpoint)},
            )
        report = run_operator(cluster, custom, args, work)
    print(json.dumps(report, indent=2))


def run_operator(
    cluster: LocalCluster, custom: client.CustomObjectsApi, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    metrics_port, health = free_port(), free_port()
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    started, started_wall = time.monotonic(), time.time()
    operator = ManagedProcess(
        "operator",
        [
            sys.executable,
            "-m",
            "kvant_cli.main",
            "run",
            "--liveness",
            f"http://127.0.0.1:{health}/healthz",
            "--metrics-host",
            "127.0.0.1",
            "--metrics-port",
            str(metrics_port),
        ],
        work / "operator.log",
        env=env,
    )
    try:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{health}/healthz"), 60, "operator")

        def all_ready() -> bool:
            items = custom.list_namespaced_custom_object("kvant.dev", "v1alpha1", NS, "quantizedmodels")[
                "items"
            ]
            ready: int = sum((i.get("status") or {}).get("phase") == "Ready" for i in items)
            return ready == int(args.models)

        wait_until(all_ready, 1800, "every model Ready", operator.log_tail)
        reconciled = time.monotonic() - started
        operator_cpu = cpu_seconds(operator.pid)
        load = os.getloadavg()
        controller = last_replicaset_seconds(cluster, started_wall)
        before = operator_metric(metrics_port, "kvant_operator_api_requests_total")
        time.sleep(args.idle_seconds)
        idle_rate = (
            (operator_metric(metrics_port, "kvant_operator_api_requests_total") - before)
            * 60
            / args.idle_seconds
        )
        latencies = patch_latencies(cluster, args.patches)
        return {
            "models": args.models,
            "secondsUntilAllReady": round(reconciled, 1),
            # A model is Ready once the deployment controller has seen its Deployment. Its first
            # step, the ReplicaSet, shows how far behind the operator's applies it ran.
            "secondsUntilLastReplicaSet": controller,
            "operatorCpuSecondsUntilAllReady": round(operator_cpu, 1),
            "loadAverageAtAllReady": [round(x, 1) for x in load],
            "operatorPeakRssMiB": round(peak_rss_mib(operator.pid), 1),
            "apiRequestsPerIdleMinute": round(idle_rate, 1),
            "limitsPatchToConfigMapSeconds": {
                "p50": round(statistics.median(latencies), 3),
                "p99": round(max(latencies), 3),
                "n": len(latencies),
            },
        }
    finally:
        operator.stop()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def last_replicaset_seconds(cluster: LocalCluster, started_wall: float) -> float:
    """When the deployment controller created the last model's ReplicaSet, in seconds from operator
    start (the API's timestamps have whole seconds)."""
    apps = client.AppsV1Api(cluster.api_client())
    replicasets = apps.list_namespaced_replica_set(NS).items
    created = [rs.metadata.creation_timestamp.timestamp() for rs in replicasets]
    return round(max(created, default=started_wall) - started_wall, 1)


def patch_latencies(cluster: LocalCluster, patches: int) -> list[float]:
    core = client.CoreV1Api(cluster.api_client())
    latencies = []
    for i in range(patches):
        name = f"m{i:03d}"
        value = 40 + i
        started = time.monotonic()
        cluster.kubectl(
            "patch",
            "-n",
            NS,
            f"qm/{name}",
            "--type=merge",
            "-p",
            json.dumps({"spec": {"limits": {"maxConcurrency": value}}}),
        )
        while (
            f"maxConcurrency: {value}"
            not in core.read_namespaced_config_map(f"{name}-limits", NS).data["limits.yaml"]
        ):
            time.sleep(0.02)
        latencies.append(time.monotonic() - started)
    return latencies


if __name__ == "__main__":
    main()
