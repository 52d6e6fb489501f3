"""What the soak runs on: a local cluster of two nodes with its S3 store, its Prometheus and the operator, one
namespace whose artifacts volume is a small tmpfs (so it can be filled), and the two served models.

- `alpha`: the tiny checkpoint from a node folder, converted to INT4 (FP8 KV, unit scales: a
  conversion Job, no calibration), two replicas behind two smg routers;
- `beta`: the same checkpoint fetched from s3:// (SeaweedFS), served as bf16, one replica.

Both run the simulator engine behind the gate, with protection reading the soak's Prometheus.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cluster_models import NODE_CHECKPOINT, bench_cluster, simulator_model
from e2e.conftest import node_folder_claim
from e2e.qm import apply
from kubernetes import client
from tests.fault_proxy import FaultProxy
from tests.model_stores import create_bucket, upload_folder

from kvant_contracts.kube_object import Obj
from kvant_dev.cluster import LocalCluster
from kvant_dev.operator_process import OperatorProcess

NS = "soak"
BUCKET = "models"
SOURCE_CREDENTIALS = "kvant-source-credentials"
ARTIFACTS_NODE = "/srv/soak/artifacts"  # the node folder of the namespace's kvant-artifacts volume
ARTIFACTS_SIZE = "256m"  # its tmpfs: the models' artifacts and sources take a few tens of MiB
FILE_SOURCES = "/var/lib/kvant/models"  # where file:// sources may be (the operator's prefix)
MAX_RETRACTIONS_PER_MINUTE = 0  # the models' spec.protection.maxRetractionsPerMinute (the default)
NODES = 2  # the node faults drain or lose one: the models' pods spread over both by default
LOST_NODE_SECONDS = 10  # the models' spec.serving.placement.lostNodeSeconds: a lost node's pods move soon


@dataclass(frozen=True)
class Served:
    """A model under load, and what "whole" means for it."""

    name: str
    replicas: int
    routers: int  # smg routers in front (0: the Service goes to the gates)


ALPHA = Served("alpha", replicas=2, routers=2)
BETA = Served("beta", replicas=1, routers=0)
SERVED = (ALPHA, BETA)


@dataclass
class Scene:
    """Everything a fault or a check reaches: the cluster, the operator, the namespace and its volume."""

    cluster: LocalCluster
    operator: OperatorProcess
    work: Path
    artifacts: Path  # the artifacts volume, as this machine sees it (a tmpfs)
    proxy: FaultProxy  # a throttling way to the S3 store, for fetches a fault must catch mid-file
    s3: Any  # boto3 client of the store
    gone: set[str] = field(default_factory=set)  # uids of pods a fault deleted
    transient: list[str] = field(default_factory=list)  # models the faults applied, deleted at the end
    serial: int = 0  # numbers the transient models and their sources

    def api(self) -> client.ApiClient:
        return self.cluster.api_client()

    def next_serial(self) -> int:
        self.serial += 1
        return self.serial


def model_manifest(served: Served, prometheus_url: str) -> Obj:
    common: Obj = {
        "limits": {"maxConcurrency": 8, "maxQueued": 32, "queueTimeoutSeconds": 10},
        "protection": {
            "targetTokenUsage": 0.9,
            "maxRetractionsPerMinute": MAX_RETRACTIONS_PER_MINUTE,
            "metrics": {"intervalSeconds": 2, "prometheusURL": prometheus_url},
        },
        "serving": {"placement": {"lostNodeSeconds": LOST_NODE_SECONDS}},
    }
    if served is ALPHA:
        return simulator_model(
            served.name,
            NS,
            served.replicas,
            weights={"format": "int4", "groupSize": 32},
            kvCache={"dtype": "fp8_e4m3", "scales": "unit"},
            **common,
        )
    return simulator_model(
        served.name, NS, served.replicas, source={"uri": f"s3://{BUCKET}/{NS}/beta"}, **common
    )


def transient_fetch(name: str, prefix: str, endpoint: str) -> Obj:
    """A model that only fetches (replicas 0: no pods), from `prefix` through `endpoint`."""
    source = {"uri": f"s3://{BUCKET}/{prefix}", "s3": {"endpoint": endpoint}}
    return simulator_model(name, NS, 0, source=source)


def transient_conversion(name: str, node_folder: str) -> Obj:
    """A model that only converts (replicas 0: no pods) the checkpoint in `node_folder`."""
    return simulator_model(
        name,
        NS,
        0,
        source={"uri": f"file://{node_folder}"},
        weights={"format": "int4", "groupSize": 32},
        kvCache={"dtype": "fp8_e4m3", "scales": "unit"},
    )


def node_checkpoint(cluster: LocalCluster) -> Path:
    return cluster.node_path(NODE_CHECKPOINT)


@contextlib.contextmanager
def soak_scene() -> Iterator[Scene]:
    """The cluster, its stores, Prometheus, the operator and the namespace; everything stopped (and the
    tmpfs unmounted) at the end. The models are applied by the caller."""
    mounted: list[Path] = []
    try:
        with bench_cluster("soak", NS, nodes=NODES) as (cluster, work):
            artifacts = cluster.node_path(ARTIFACTS_NODE)
            artifacts.mkdir(parents=True)
            tmpfs = ["mount", "-t", "tmpfs", "-o", f"size={ARTIFACTS_SIZE}", "kvant-soak", str(artifacts)]
            subprocess.run(tmpfs, check=True)
            mounted.append(artifacts)
            # The namespace's kvant-artifacts claim, over the tmpfs the soak fills (its size is the limit).
            for obj in node_folder_claim(NS, "kvant-artifacts", ARTIFACTS_NODE, "ReadWriteMany"):
                cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))
            stores = cluster.start_model_stores()
            s3 = create_bucket(stores.s3, BUCKET)
            upload_folder(s3, node_checkpoint(cluster), BUCKET, f"{NS}/beta")
            env = stores.s3.env()
            keys = {k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
            secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SOURCE_CREDENTIALS}}
            cluster.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps({**secret, "stringData": keys}))
            cluster.start_prometheus()
            operator = OperatorProcess(
                cluster, work, stores, file_sources=FILE_SOURCES, credentials_secret=SOURCE_CREDENTIALS
            )
            with FaultProxy((stores.s3.host, stores.s3.port), host=stores.s3.host) as proxy:
                operator.start()
                try:
                    yield Scene(cluster, operator, work, artifacts, proxy, s3)
                finally:
                    operator.stop()
    finally:  # the cluster has stopped (its pods with it): nothing holds the tmpfs now
        for path in mounted:
            subprocess.run(["umount", str(path)], check=False)


def apply_model(scene: Scene, manifest: Obj) -> None:
    apply(scene.cluster, NS, manifest)
