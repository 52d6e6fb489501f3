"""E2E fixtures: the CRDs, the operator as a local process, a tiny generated checkpoint, a namespace
with an artifact volume. Everything runs for real on the session's local cluster."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.startup_report import report_startup
from tests.tiny_checkpoints import tiny_checkpoint as shared_tiny_checkpoint

from kvant_contracts.kube_object import Obj
from kvant_dev.cluster import LocalCluster
from kvant_dev.model_stores import ModelStores
from kvant_dev.operator_process import OperatorProcess
from kvant_dev.tinychat import ensure_tiny_chat_model

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def metrics_adapter(cluster: LocalCluster, pytestconfig: pytest.Config) -> LocalCluster:
    """The cluster with its Prometheus and prometheus-adapter serving the custom metrics API, so the
    HorizontalPodAutoscalers the operator renders read the gates' demand (stopped with the cluster)."""
    started = time.monotonic()
    cluster.start_metrics_adapter()
    report_startup(pytestconfig, "prometheus + prometheus-adapter", started)
    return cluster


@pytest.fixture(scope="session")
def chat_model_uri(kvant_crds: LocalCluster) -> str:
    """The tiny chat model at the node path examples/tinychat-cpu.yaml names (the real engine's model);
    returns its file:// URI."""
    uri: str = yaml.safe_load((REPO / "examples" / "tinychat-cpu.yaml").read_text())["spec"]["source"]["uri"]
    shutil.copytree(
        ensure_tiny_chat_model(), kvant_crds.node_path(uri.removeprefix("file://")), dirs_exist_ok=True
    )
    return uri


@pytest.fixture(scope="session")
def kvant_crds(cluster: LocalCluster) -> LocalCluster:
    for crd in sorted((REPO / "crds").glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
    cluster.wait_established("quantizedmodels.kvant.dev")
    return cluster


SOURCE_CREDENTIALS = "kvant-source-credentials"
HUB_TOKEN = "hf_e2e_local_token"  # the Hub stand-in's token: fetches of hf:// sources must send it


@pytest.fixture(scope="session")
def model_stores(kvant_crds: LocalCluster) -> ModelStores:
    """SeaweedFS and the Hub stand-in on the cluster's host link (stopped with the cluster)."""
    return kvant_crds.start_model_stores(hub_token=HUB_TOKEN)


@pytest.fixture(scope="session")
def operator(
    kvant_crds: LocalCluster,
    model_stores: ModelStores,
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
) -> Iterator[OperatorProcess]:
    # The example's folder and the per-test node folders (node_dir) may be file:// sources.
    proc = OperatorProcess(
        kvant_crds,
        tmp_path_factory.mktemp("operator"),
        model_stores,
        file_sources="/var/lib/kvant/models,/srv/e2e",
        credentials_secret=SOURCE_CREDENTIALS,
    )
    started = time.monotonic()
    proc.start()
    report_startup(pytestconfig, "operator", started)
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def tiny_checkpoint() -> Path:
    """The session's tiny Llama checkpoint, shared with the unit tests (read-only: copy to change it)."""
    return shared_tiny_checkpoint("llama")


@dataclass(frozen=True)
class NodeDir:
    """A folder on the local node's own filesystem: `host` is where this machine writes it, `node`
    the path a hostPath volume or a file:// source names (node paths live in the cluster's folder)."""

    host: Path
    node: str

    def __truediv__(self, name: str) -> NodeDir:
        return NodeDir(self.host / name, f"{self.node}/{name}")

    @property
    def uri(self) -> str:
        return f"file://{self.node}"


@pytest.fixture
def node_dir(kvant_crds: LocalCluster, request: pytest.FixtureRequest) -> NodeDir:
    """A fresh folder of this test on the node."""
    node = f"/srv/e2e/{_namespace_name(request.node)}"
    folder = NodeDir(kvant_crds.node_path(node), node)
    shutil.rmtree(folder.host, ignore_errors=True)
    folder.host.mkdir(parents=True)
    return folder


@pytest.fixture(scope="session")
def node_checkpoint(kvant_crds: LocalCluster, tiny_checkpoint: Path) -> str:
    """The tiny checkpoint at the node path examples/tiny.yaml names; returns its file:// URI."""
    manifest: Obj = yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text())
    uri: str = manifest["spec"]["source"]["uri"]
    shutil.copytree(tiny_checkpoint, kvant_crds.node_path(uri.removeprefix("file://")), dirs_exist_ok=True)
    return uri


@pytest.fixture
def namespace(kvant_crds: LocalCluster, node_dir: NodeDir, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace with a `kvant-artifacts` claim bound to the node folder `node_dir/artifacts`."""
    name = _namespace_name(request.node)
    artifacts = node_dir / "artifacts"
    artifacts.host.mkdir()
    for obj in _namespace_objects(name, artifacts.node):
        kvant_crds.kubectl("apply", "-f", "-", input=json.dumps(obj))
    yield name
    # The models first: Kubernetes deletes a namespace's pods first and its other objects only after
    # the serving pods' grace period (test_namespace_deletion_completes), so models left to the
    # namespace stay live for minutes, and the operator goes on reconciling them beside every later
    # test (and test_unchanged_model_causes_no_writes waits for them to go). Deleted here, each daemon
    # stops at once and kopf drops the finalizer. --ignore-not-found: a test may have deleted its
    # namespace itself. The PV is node_folder_claim's.
    kvant_crds.kubectl(
        "delete",
        "quantizedmodels.kvant.dev",
        "--all",
        f"--namespace={name}",
        "--wait=false",
        "--ignore-not-found",
    )
    kvant_crds.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")
    kvant_crds.kubectl("delete", "pv", f"{name}-kvant-artifacts", "--wait=false", "--ignore-not-found")


def _namespace_name(node: pytest.Item) -> str:
    """A DNS label unique per test (parametrized cases too): readable prefix + a hash of the test id."""
    slug = re.sub(r"[^a-z0-9]+", "-", node.name.removeprefix("test_").lower())[:36].strip("-")
    return f"e2e-{slug}-{hashlib.sha256(node.nodeid.encode()).hexdigest()[:6]}"


def _namespace_objects(name: str, artifacts: str) -> list[Obj]:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    return [namespace, *node_folder_claim(name, "kvant-artifacts", artifacts, "ReadWriteMany")]


def node_folder_claim(namespace: str, claim: str, node_path: str, access: str) -> list[Obj]:
    """A PersistentVolume over a node folder (PV `<namespace>-<claim>`) and the claim bound to it."""
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{namespace}-{claim}"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": [access],
                "storageClassName": "kvant-local",
                "hostPath": {"path": node_path, "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": [access],
                "storageClassName": "kvant-local",
                "resources": {"requests": {"storage": "10Gi"}},
            },
        },
    ]


@pytest.fixture
def tiny_model(node_checkpoint: str) -> Callable[..., Obj]:
    """The tiny example as written (its source is on the node); each override replaces a spec section."""

    def make(name: str = "tiny", **overrides: Any) -> Obj:
        manifest: Obj = yaml.safe_load((REPO / "examples" / "tiny.yaml").read_text())
        manifest["metadata"] = {"name": name}
        manifest["spec"].update(overrides)
        return manifest

    return make
