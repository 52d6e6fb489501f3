"""One local cluster: its network, the control plane, optionally the controllers, kube-proxy, the
node agent, Prometheus and prometheus-adapter. Everything it writes lives under `workdir`."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client
from kubernetes import config as kube_config

from kvant_dev.controlplane import ControlPlane
from kvant_dev.metrics_adapter import API_SERVICE, MetricsAdapter
from kvant_dev.model_stores import ModelStores
from kvant_dev.netutil import wait_until
from kvant_dev.network import Addresses, ClusterNetwork
from kvant_dev.nodeagent.node import node_name
from kvant_dev.nodeagent.node_faults import lost_nodes, set_lost_nodes
from kvant_dev.nodeagent.podrunner import pod_dir
from kvant_dev.nodeagent.volumes import KUBELET_SYNC_SECONDS, file_volume_dir
from kvant_dev.process import ManagedProcess
from kvant_dev.prometheus import Prometheus, pod_discovery_job
from kvant_dev.toolchain import Toolchain, pinned_versions

_NODE_READY_TIMEOUT = 90.0
_API_SERVICE_TIMEOUT = 60.0


class KubectlError(RuntimeError):
    """A kubectl call failed; the message carries its stderr."""


@dataclass
class LocalCluster:
    workdir: Path
    nodes: int = 1
    # More nodes, registered cordoned: a test that needs a second node uncordons one, and nothing else
    # is scheduled there (kvant_dev.nodeagent.node_faults loses and restores nodes).
    spare_nodes: int = 0
    gpus_per_node: int = 8
    tied_to_parent: bool = True
    # Seconds before a ConfigMap or Secret edit reaches running pods' volumes (a kubelet's sync period;
    # see kvant_dev.nodeagent.volumes). Code that must see an edit sooner reads it through the API.
    projection_delay: float = KUBELET_SYNC_SECONDS
    toolchain: Toolchain = field(default_factory=Toolchain.locate)
    control_plane: ControlPlane = field(init=False)
    network: ClusterNetwork = field(init=False)
    node_agent: ManagedProcess | None = None
    prometheus: Prometheus | None = None
    metrics_adapter: MetricsAdapter | None = None
    model_stores: ModelStores | None = None

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.control_plane = ControlPlane(self.workdir, self.toolchain, tied_to_parent=self.tied_to_parent)
        self.network = ClusterNetwork(self.workdir, tied_to_parent=self.tied_to_parent)

    @property
    def addresses(self) -> Addresses:
        return self.control_plane.net

    @property
    def agent_dir(self) -> Path:
        """The node agent's folder: its pods' volumes and logs, and the nodes' filesystem (`fs`)."""
        return self.workdir / "node"

    @property
    def node_root(self) -> Path:
        """The nodes' own filesystem: hostPath volumes, local PVs and file:// sources resolve below it."""
        return self.agent_dir / "fs"

    def pod_volume(self, namespace: str, pod: str, uid: str, volume: str) -> Path:
        """A running pod's ConfigMap, Secret or projected volume on this machine, as the pod sees it."""
        return file_volume_dir(pod_dir(self.agent_dir, namespace, pod, uid), volume)

    def node_path(self, path: str) -> Path:
        """Where a node path (as a hostPath or file:// URI names it) lives on this machine."""
        return self.node_root / path.lstrip("/")

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    @property
    def prometheus_targets(self) -> Path:
        """Where the node agent lists scrape targets for Prometheus's file-based discovery."""
        return self.workdir / "prometheus-targets.json"

    def start_core(self) -> None:
        try:
            self.control_plane.start_core(self.network.up())
        except BaseException:
            self.stop()
            raise

    def start_workloads(self) -> None:
        """Controllers, scheduler, kube-proxy and the node agent: what Services, Jobs and pods need."""
        if self.node_agent is not None:
            return
        self.control_plane.start_controllers()
        argv = [
            sys.executable,
            "-m",
            "kvant_dev.nodeagent",
            f"--kubeconfig={self.kubeconfig}",
            f"--root={self.agent_dir}",
            f"--pki-dir={self.control_plane.pki_dir}",
            f"--nodes={self.nodes}",
            f"--spare-nodes={self.spare_nodes}",
            f"--gpus-per-node={self.gpus_per_node}",
            f"--kubelet-version={pinned_versions()['KUBE_VERSION']}",
            f"--prometheus-targets={self.prometheus_targets}",
            f"--node-netns={self.network.netns}",
            f"--network-slot={self.addresses.slot}",
            f"--cluster-dns={self.addresses.gateway}",
            f"--projection-delay={self.projection_delay}",
        ]
        if self.tied_to_parent:
            argv.append("--tie-pods")
        self.node_agent = ManagedProcess(
            "node-agent", argv, self.control_plane.log_path("node-agent"), tied_to_parent=self.tied_to_parent
        )
        all_nodes = self.nodes + self.spare_nodes
        wait_until(self._nodes_ready, _NODE_READY_TIMEOUT, f"{all_nodes} Ready node(s)", self.diagnostics)
        # kube-proxy waits for its Node object, so it starts once the agent has registered them. One
        # serves every node: they share the node namespace (one flat pod network).
        self.control_plane.start_kube_proxy(self.network.netns, node_name(0), self.toolchain.nft_env())
        self.control_plane.start_dns(self.network.netns)

    def start_prometheus(self) -> Prometheus:
        if self.prometheus is None:
            self.prometheus = Prometheus(
                self.toolchain.prometheus,
                self.workdir / "prometheus",
                [pod_discovery_job(self.prometheus_targets)],
                tied_to_parent=self.tied_to_parent,
                host=self.addresses.host_ip,
            )
            self.prometheus.start()
        return self.prometheus

    def start_metrics_adapter(self) -> MetricsAdapter:
        """prometheus-adapter serving custom.metrics.k8s.io from the cluster's Prometheus (started here
        if need be), registered as an aggregated API: what a HorizontalPodAutoscaler on demand reads."""
        if self.metrics_adapter is None:
            prometheus = self.start_prometheus()
            adapter = MetricsAdapter(
                self.toolchain.prometheus_adapter,
                self.workdir / "prometheus-adapter",
                self.addresses.host_ip,
                prometheus.url,
                self.kubeconfig,
                tied_to_parent=self.tied_to_parent,
            )
            try:
                adapter.start()
                registration = {"apiVersion": "v1", "kind": "List", "items": adapter.registration()}
                self.kubectl("apply", "-f", "-", input=json.dumps(registration))
                wait_until(
                    self._api_service_available,
                    _API_SERVICE_TIMEOUT,
                    f"APIService {API_SERVICE} to be Available",
                    adapter.log_tail,
                )
            except BaseException:
                # An APIService left unavailable makes every kubectl discovery in this cluster warn.
                self.kubectl("delete", "apiservice", API_SERVICE, "--ignore-not-found", check=False)
                adapter.stop()
                raise
            self.metrics_adapter = adapter
        return self.metrics_adapter

    def start_model_stores(self, hub_token: str | None = None) -> ModelStores:
        """SeaweedFS (S3) and the Hub stand-in on the host link, where pods reach them."""
        if self.model_stores is None:
            stores = ModelStores(
                self.workdir / "stores", self.addresses.host_ip, self.tied_to_parent, hub_token
            )
            try:
                stores.start()
            except BaseException:
                stores.stop()
                raise
            self.model_stores = stores
        return self.model_stores

    def stop(self) -> None:
        if self.model_stores is not None:
            self.model_stores.stop()
            self.model_stores = None
        if self.metrics_adapter is not None:
            self.metrics_adapter.stop()
            self.metrics_adapter = None
        if self.prometheus is not None:
            self.prometheus.stop()
        if self.node_agent is not None:
            self.node_agent.stop(grace_seconds=20.0)
            self.node_agent = None
        self.control_plane.stop()
        self.network.down()

    def api_client(self) -> client.ApiClient:
        return kube_config.new_client_from_config(str(self.kubeconfig))

    def wait_established(self, crd: str, timeout: float = 60) -> None:
        """Until the CRD serves its kind. Not `kubectl wait --for=condition=Established`: right after
        the apply the CRD may have no status yet, and kubectl then fails at once instead of waiting."""

        def established() -> bool:
            jsonpath = '{.status.conditions[?(@.type=="Established")].status}'
            result = self.kubectl("get", f"crd/{crd}", "-o", f"jsonpath={jsonpath}", check=False)
            return result.returncode == 0 and result.stdout.strip() == "True"

        wait_until(established, timeout, f"CRD {crd} to be established")

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        # kubectl caches discovery under ~/.kube/cache unless told: the cluster's folder keeps it hermetic.
        cache = f"--cache-dir={self.kubeconfig.parent / 'kubectl-cache'}"
        argv = [str(self.toolchain.kubectl), f"--kubeconfig={self.kubeconfig}", cache, *args]
        result = subprocess.run(argv, input=input, capture_output=True, text=True, check=False, timeout=120)
        if check and result.returncode != 0:
            raise KubectlError(
                f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result

    def diagnostics(self, lines: int = 30) -> str:
        parts = [self.control_plane.diagnostics(lines)]
        adapter = self.metrics_adapter.process if self.metrics_adapter else None
        for proc in (self.node_agent, self.prometheus.process if self.prometheus else None, adapter):
            if proc is not None:
                parts.append(
                    f"--- {proc.name}, last {lines} lines of {proc.log_path} ---\n{proc.log_tail(lines)}"
                )
        return "\n".join(parts)

    def _api_service_available(self) -> bool:
        jsonpath = '{.status.conditions[?(@.type=="Available")].status}'
        result = self.kubectl("get", "apiservice", API_SERVICE, "-o", f"jsonpath={jsonpath}", check=False)
        return result.returncode == 0 and result.stdout.strip() == "True"

    def _nodes_ready(self) -> bool:
        if self.node_agent is not None and not self.node_agent.running():
            raise RuntimeError(f"node agent exited during start-up:\n{self.node_agent.log_tail(60)}")
        nodes = (
            client.CoreV1Api(self.api_client()).list_node(label_selector="kvant.dev/local-node=true").items
        )
        ready = [
            n
            for n in nodes
            if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        ]
        return len(ready) >= self.nodes + self.spare_nodes

    @property
    def spare_node_names(self) -> list[str]:
        """The spare nodes' names (registered cordoned), in order."""
        return [node_name(i) for i in range(self.nodes, self.nodes + self.spare_nodes)]

    def lose_node(self, name: str) -> None:
        """The node stops reporting and its pods die unreported (kvant_dev.nodeagent.node_faults)."""
        set_lost_nodes(self.agent_dir, lost_nodes(self.agent_dir) | {name})

    def restore_node(self, name: str) -> None:
        """The lost node reports again, like a rebooted kubelet."""
        set_lost_nodes(self.agent_dir, lost_nodes(self.agent_dir) - {name})
