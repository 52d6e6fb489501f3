"""`kvant dev up|down|status|env`: the local cluster for demos and manual poking."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

from kvant_dev import tiny_command
from kvant_dev.network import release_test_range_guard
from kvant_dev.nodeagent.volumes import KUBELET_SYNC_SECONDS
from kvant_dev.process import is_alive, stop_group
from kvant_dev.toolchain import Toolchain, cache_dir


class ClusterState(TypedDict):
    kubeconfig: str
    node_root: str
    prometheus: str | None
    stores: dict[str, str]
    processes: dict[str, int]
    logs: str


def state_dir() -> Path:
    return Path(os.environ.get("KVANT_DEV_DIR", cache_dir() / "dev-cluster"))


def _state_file() -> Path:
    return state_dir() / "state.json"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = subparsers.add_parser("dev", help="run a local cluster (real apiserver, scheduler, GPU node agent)")
    actions = dev.add_subparsers(dest="dev_command", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start the local cluster and leave it running")
    up.add_argument("--nodes", type=int, default=1, help="GPU nodes to register (default 1)")
    up.add_argument(
        "--gpus-per-node", type=int, default=8, help="nvidia.com/gpu capacity per node (default 8)"
    )
    up.add_argument(
        "--prometheus",
        action="store_true",
        help="also run Prometheus scraping annotated pods, and prometheus-adapter serving their demand as "
        "the custom metrics API (so a model's autoscaler works)",
    )
    up.add_argument(
        "--projection-delay",
        type=float,
        default=KUBELET_SYNC_SECONDS,
        metavar="SECONDS",
        help="how long a ConfigMap or Secret edit waits before it reaches running pods' volumes, as a "
        "kubelet's periodic pod sync delays it (default: %(default)s; 0: at once)",
    )
    up.set_defaults(run=_up)
    actions.add_parser("down", help="stop the local cluster and delete its state").set_defaults(run=_down)
    actions.add_parser("status", help="show the cluster's processes and nodes").set_defaults(run=_status)
    actions.add_parser("env", help="print shell exports for kubectl and helm").set_defaults(run=_env)
    tiny_command.register(subparsers)  # the development package's other commands: the fixtures


def _up(args: argparse.Namespace) -> int:
    from kvant_dev.cluster import LocalCluster  # noqa: PLC0415 - keeps `kvant --help` light

    if _state_file().exists():
        print(f"a local cluster is already up (state in {state_dir()}); `kvant dev down` first")
        return 1
    shutil.rmtree(state_dir(), ignore_errors=True)
    cluster = LocalCluster(
        state_dir(),
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        tied_to_parent=False,
        projection_delay=args.projection_delay,
    )
    # Ctrl-C or SIGTERM half-way must not leave processes, links and routes without a state file.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        cluster.start_core()
        cluster.start_workloads()
        if args.prometheus:
            cluster.start_metrics_adapter()  # starts the cluster's Prometheus first
        stores = cluster.start_model_stores()
    except BaseException:
        print(cluster.diagnostics())
        cluster.stop()
        raise
    # The node namespace's holder goes first here, so it is stopped last: pods, then kube-proxy, then it.
    processes = {"node-netns": cluster.network.holder} if cluster.network.holder else {}
    processes.update(cluster.control_plane.processes)
    if cluster.node_agent:
        processes["node-agent"] = cluster.node_agent
    if cluster.prometheus and cluster.prometheus.process:
        processes["prometheus"] = cluster.prometheus.process
    if cluster.metrics_adapter and cluster.metrics_adapter.process:
        processes["prometheus-adapter"] = cluster.metrics_adapter.process
    processes.update(stores.processes())
    state: ClusterState = {
        "kubeconfig": str(cluster.kubeconfig),
        "node_root": str(cluster.node_root),
        "prometheus": cluster.prometheus.url if cluster.prometheus else None,
        "stores": stores.env(),
        # Stop order: the node agent first, so it can stop its pods gracefully.
        "processes": {name: proc.pid for name, proc in reversed(list(processes.items()))},
        "logs": str(cluster.control_plane.log_path("").parent),
    }
    _state_file().write_text(json.dumps(state, indent=2))
    print(f"local cluster is up: {args.nodes} node(s) with {args.gpus_per_node} GPUs each")
    _print_env(state)
    return 0


def _down(args: argparse.Namespace) -> int:
    state = _load_state()
    if state is None:
        print("no local cluster is up")
        return 0
    for name, pid in state["processes"].items():
        # The node agent stops its pods gracefully; SeaweedFS ignores SIGTERM for long (see s3server).
        stop_group(int(pid), grace_seconds={"node-agent": 20.0, "seaweedfs": 3.0}.get(name, 10.0))
        print(f"stopped {name} (pid {pid})")
    release_test_range_guard()
    shutil.rmtree(state_dir(), ignore_errors=True)
    return 0


def _status(args: argparse.Namespace) -> int:
    state = _load_state()
    if state is None:
        print("no local cluster is up; start one with `kvant dev up`")
        return 1
    healthy = True
    for name, pid in state["processes"].items():
        alive = is_alive(int(pid))
        healthy &= alive
        print(f"{name:24} pid {pid:<8} {'running' if alive else 'NOT RUNNING'}")
    print(f"logs: {state['logs']}")
    kubectl = str(Toolchain.locate().kubectl)
    subprocess.run(
        [kubectl, f"--kubeconfig={state['kubeconfig']}", "get", "nodes", "-o", "wide"], check=False
    )
    return 0 if healthy else 1


def _env(args: argparse.Namespace) -> int:
    state = _load_state()
    if state is None:
        print("no local cluster is up; start one with `kvant dev up`")
        return 1
    _print_env(state)
    return 0


def _print_env(state: ClusterState) -> None:
    tools = Toolchain.locate()
    print(f"export KUBECONFIG={state['kubeconfig']}")
    print(f"export PATH={tools.kubectl.parent}:{tools.helm.parent}:$PATH")
    print(f"export KVANT_NODE_ROOT={state['node_root']}  # the node's filesystem (hostPath, file://)")
    if state.get("prometheus"):
        print(f"# prometheus: {state['prometheus']}")
    # The local S3 (SeaweedFS) and the Hub stand-in, for boto3, huggingface_hub and `kvant fetch`;
    # pods reach them at the same addresses.
    for name, value in (state.get("stores") or {}).items():
        print(f"export {name}={value}")


def _load_state() -> ClusterState | None:
    path = _state_file()
    if not path.exists():
        return None
    state: ClusterState = json.loads(path.read_text())
    return state
