"""What the cluster benches share: a local cluster with Kvant's CRD, one namespace and the tiny
checkpoint on the node, and the QuantizedModel they apply: that checkpoint in bf16 (so no conversion
Job) served by the simulator on a simulated 2 GiB GPU, from a node path the operator's default file://
prefix allows. Each bench adds what it measures (replicas, limits, the router)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvant_dev.cluster import LocalCluster
from kvant_dev.tinymodel import make_tiny_checkpoint

CRD = Path(__file__).resolve().parents[1] / "crds" / "quantizedmodels.kvant.dev.yaml"

NODE_CHECKPOINT = "/var/lib/kvant/models/tiny-llama"


def simulator_model(name: str, namespace: str, replicas: int, **spec: dict[str, Any]) -> dict[str, Any]:
    serving = {"engine": "simulator", "replicas": replicas, "gpu": {"memoryGiB": 2}, "memFractionStatic": 0.9}
    return {
        "apiVersion": "kvant.dev/v1alpha1",
        "kind": "QuantizedModel",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {"uri": f"file://{NODE_CHECKPOINT}"},
            "weights": {"format": "bf16"},
            "kvCache": {"dtype": "bf16"},
            **spec,
            "serving": {**serving, **spec.get("serving", {})},
        },
    }


@contextlib.contextmanager
def bench_cluster(name: str, namespace: str, nodes: int = 1) -> Iterator[tuple[LocalCluster, Path]]:
    """A started cluster of `nodes` nodes with the CRD, `namespace` and the checkpoint at
    NODE_CHECKPOINT; yields it and the bench's work folder (under the system's temporary folder), and
    stops it at the end."""
    work = Path(tempfile.mkdtemp(prefix=f"kvant-bench-{name}-"))
    cluster = LocalCluster(work / "cluster", nodes=nodes)
    make_tiny_checkpoint(cluster.node_path(NODE_CHECKPOINT))
    try:
        cluster.start_core()
        cluster.start_workloads()
        cluster.kubectl("apply", "--server-side", "-f", str(CRD))
        cluster.wait_established("quantizedmodels.kvant.dev")
        cluster.kubectl("create", "namespace", namespace)
        yield cluster, work
    finally:
        cluster.stop()
