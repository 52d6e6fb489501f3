"""The node agent: registers nodes, watches their pods and runs one worker thread per pod."""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvant_contracts.kube_object import Obj
from kvant_dev import pki
from kvant_dev.netutil import free_port
from kvant_dev.network import Addresses
from kvant_dev.nodeagent.fieldrefs import service_links
from kvant_dev.nodeagent.images import load_image_map
from kvant_dev.nodeagent.informer import CONNECTION_ERRORS, Informer
from kvant_dev.nodeagent.logserver import serve_logs
from kvant_dev.nodeagent.node import NodeHeartbeat, NodeSpec, node_name
from kvant_dev.nodeagent.node_faults import lost_nodes
from kvant_dev.nodeagent.podrunner import PodContext, PodRunner
from kvant_dev.nodeagent.rootfs import read_host_submounts
from kvant_dev.nodeagent.sandbox import PodNetwork
from kvant_dev.nodeagent.scrape_targets import write_targets
from kvant_dev.nodeagent.volumes import KUBELET_SYNC_SECONDS
from kvant_dev.toolchain import built_environment

log = logging.getLogger("kvant.nodeagent")
_TICK, _LEASE_EVERY, _STATUS_EVERY = 0.25, 5.0, 30.0


@dataclass(frozen=True)
class AgentConfig:
    root: Path
    pki_dir: Path
    node_netns: Path  # the node network namespace, with the pod bridge
    network_slot: int  # the cluster's slot: its pod subnet (see kvant_dev.network)
    cluster_dns: str | None = None  # the nameserver of ClusterFirst pods, as the kubelet's --cluster-dns
    nodes: int = 1
    spare_nodes: int = 0  # registered cordoned, after the others: a test uncordons one to move pods to
    gpus_per_node: int = 8
    kubelet_version: str = "v0.0.0"
    tied_to_parent: bool = False
    prometheus_targets: Path | None = None
    projection_delay: float = KUBELET_SYNC_SECONDS  # ConfigMap and Secret edits reach volumes this late


class NodeAgent:
    def __init__(self, api: client.ApiClient, config: AgentConfig) -> None:
        self.api, self.config = api, config
        self.core = client.CoreV1Api(api)
        self.nodes = [self._node_spec(i) for i in range(config.nodes + config.spare_nodes)]
        self._lost: frozenset[str] = frozenset()  # node_faults: nodes that report nothing
        self.heartbeats = [NodeHeartbeat(api, spec) for spec in self.nodes]
        self.addresses = Addresses(config.network_slot)
        self.runners: dict[str, PodRunner] = {}  # by pod uid
        self._ips: dict[str, str] = {}  # pod uid -> pod IP
        # Pods a lost node took down: started again in a new sandbox with a new address (_allocate_ip).
        self._afresh: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self.informers = {
            "Pod": Informer("pods", self.core.list_pod_for_all_namespaces),
            "ConfigMap": Informer("configmaps", self.core.list_config_map_for_all_namespaces),
            "Secret": Informer("secrets", self.core.list_secret_for_all_namespaces),
            "PersistentVolumeClaim": Informer(
                "pvcs", self.core.list_persistent_volume_claim_for_all_namespaces
            ),
            "PersistentVolume": Informer("pvs", self.core.list_persistent_volume),
            "Service": Informer("services", self.core.list_service_for_all_namespaces),
        }
        self.ctx = PodContext(
            lookup=self._lookup,
            token_source=self._token,
            image_map=load_image_map(built_environment),
            base_env=self._base_env,
            root=config.root,
            node_root=config.root / "fs",
            network=PodNetwork(config.node_netns, self.addresses.gateway, cluster_dns=config.cluster_dns),
            submounts=read_host_submounts(),
            tied_to_parent=config.tied_to_parent,
            patch_status=self._patch_status,
            projection_delay=config.projection_delay,
        )

    def _base_env(self, namespace: str) -> dict[str, str]:
        """What every container starts with: the image's PATH and HOME (the pod runner puts HOME in the
        pod's own folder), then the Service variables
        of its namespace and the apiserver's `kubernetes` Service (in-cluster clients read those)."""
        services = self.informers["Service"].in_namespace(namespace)
        kubernetes = self.informers["Service"].get("default", "kubernetes")
        return {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/root",
            "PYTHONUNBUFFERED": "1",
            **service_links(services),
            **service_links([kubernetes] if kubernetes else []),
        }

    def _node_spec(self, index: int) -> NodeSpec:
        host_ip = f"127.0.{10 + index}.1"
        return NodeSpec(
            name=node_name(index),
            host_ip=host_ip,
            log_port=free_port(host_ip),
            gpus=self.config.gpus_per_node,
            kubelet_version=self.config.kubelet_version,
            cordoned=index >= self.config.nodes,
        )

    def run(self) -> None:
        for informer in self.informers.values():
            informer.start()
        for informer in self.informers.values():
            informer.wait_synced()
        for spec, heartbeat in zip(self.nodes, self.heartbeats, strict=True):
            certs = pki.issue_serving_cert(self.config.pki_dir, spec.name, [spec.host_ip])
            serve_logs(
                spec.host_ip,
                spec.log_port,
                cert=certs.cert,
                key=certs.key,
                ca=self.config.pki_dir / "ca.crt",
                locate=self._locate_log,
            )
            heartbeat.register()
            log.info("node %s ready at %s with %d GPUs", spec.name, spec.host_ip, spec.gpus)
        self._loop()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        last_lease = last_status = time.monotonic()
        while not self._stop.wait(_TICK):
            self._follow_faults()
            self._sync_pods()
            if self.config.prometheus_targets is not None:
                write_targets(self.config.prometheus_targets, list(self.runners.values()))
            now = time.monotonic()
            if now - last_lease > _LEASE_EVERY:
                self._heartbeat(lambda hb: hb.renew_lease())
                last_lease = now
            if now - last_status > _STATUS_EVERY:
                self._heartbeat(lambda hb: hb.report_status())
                last_status = now
        for worker in self._workers:
            worker.join(timeout=10.0)

    def _follow_faults(self) -> None:
        lost = lost_nodes(self.config.root)
        if lost == self._lost:
            return
        for name in sorted(lost - self._lost):
            log.warning("node %s lost: no heartbeats, its pods killed without a report", name)
        restored = self._lost - lost
        self._lost = lost
        for name in sorted(restored):
            log.info("node %s back: reporting again, like a rebooted kubelet", name)
        # At once, as a kubelet does when it starts: the node controller sees it Ready again.
        self._heartbeat(lambda hb: hb.report_status() if hb.spec.name in restored else None)
        self._heartbeat(lambda hb: hb.renew_lease() if hb.spec.name in restored else None)

    def _heartbeat(self, action: Any) -> None:
        for heartbeat in self.heartbeats:
            if heartbeat.spec.name in self._lost:
                continue
            try:
                action(heartbeat)
            except (ApiException, *CONNECTION_ERRORS) as err:
                log.warning("heartbeat for %s failed: %s", heartbeat.spec.name, err)

    def _sync_pods(self) -> None:
        mine = {spec.name: spec for spec in self.nodes if spec.name not in self._lost}
        for pod in list(self.informers["Pod"].store.values()):
            node = mine.get(pod["spec"].get("nodeName", ""))
            uid = pod["metadata"]["uid"]
            if node is None or uid in self.runners:
                continue
            if pod["metadata"].get("deletionTimestamp"):
                self._remove(
                    pod
                )  # nothing of it runs here: confirm the deletion at once, as the kubelet does
                continue
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                continue  # finished before this agent started: nothing to run
            runner = PodRunner(pod, self._allocate_ip(pod, node), node.host_ip, self.ctx)
            with self._lock:
                self.runners[uid] = runner
            worker = threading.Thread(
                target=self._work, args=(runner,), name=f"pod-{runner.name}", daemon=True
            )
            self._workers.append(worker)
            worker.start()

    def _work(self, runner: PodRunner) -> None:
        uid = runner.pod["metadata"]["uid"]
        try:
            while True:
                if self._stop.is_set():
                    runner.terminate(grace_seconds=5.0)  # agent shutdown takes its pods along
                    return
                if runner.pod["spec"].get("nodeName") in self._lost:
                    runner.terminate(grace_seconds=0.0)  # the node died with it: nothing is reported
                    with self._lock:
                        self._afresh.add(uid)
                    return
                latest = self.informers["Pod"].get(runner.namespace, runner.name)
                if latest is None or latest["metadata"]["uid"] != uid:
                    runner.terminate(grace_seconds=0.0)  # force-deleted: nothing left to report to
                    return
                runner.pod["metadata"] = latest["metadata"]
                if latest["metadata"].get("deletionTimestamp"):
                    self._finish_deletion(runner, latest)
                    return
                runner.tick()
                time.sleep(_TICK)
        except Exception:
            log.exception("pod worker %s/%s crashed", runner.namespace, runner.name)
            runner.terminate(grace_seconds=0.0)
        finally:
            with self._lock:
                self.runners.pop(uid, None)
                self._ips.pop(uid, None)

    def _finish_deletion(self, runner: PodRunner, pod: Obj) -> None:
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
        runner.terminate(grace)
        runner.report()
        self._remove(pod)

    def _remove(self, pod: Obj) -> None:
        meta = pod["metadata"]
        # Options go in the body only: the apiserver ignores query parameters when a body is sent.
        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
        )
        try:
            self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body=options)
        except ApiException as err:
            if err.status not in (404, 409):
                raise
        except CONNECTION_ERRORS as err:  # _sync_pods tries again while the pod is still listed
            log.warning("deleting %s/%s not delivered, will retry: %s", meta["namespace"], meta["name"], err)

    def _allocate_ip(self, pod: Obj, node: NodeSpec) -> str:
        """A pod's address: the one its status already names, when this agent restarted under running
        pods (a real kubelet's restart leaves its pods' sandboxes and addresses alone), else a free
        address of the cluster's pod subnet (every node shares the one bridge).

        A pod whose node was lost and came back gets a new address, as a rebooted node's new sandbox
        gets one from its CNI. Reusing the old one let a connection routed to the pod before the loss
        (its SYN retried while the node was down) reach the restarted container before anything had
        judged it ready: the restarted router, with no engine yet, answered smg's 404 (#40).

        A fresh address also skips those that running pods' statuses still name, until their own
        runners claim them again; the status report replaces the pod's podIPs list outright
        (PodRunner._status), since the apiserver merges that list by IP."""
        uid = pod["metadata"]["uid"]
        previous = (pod.get("status") or {}).get("podIP")
        named = {
            (other.get("status") or {}).get("podIP")
            for other in self.informers["Pod"].store.values()
            if other["metadata"]["uid"] != uid
            and (other.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        }
        subnet = self.addresses.pod_ips()
        with self._lock:
            afresh = uid in self._afresh
            self._afresh.discard(uid)
            used = set(self._ips.values())
            if afresh and previous:
                used.add(previous)
            elif previous in subnet and previous not in used:
                self._ips[uid] = previous
                return str(previous)
            for candidate in subnet:
                if candidate not in used and candidate not in named:
                    self._ips[uid] = candidate
                    return candidate
        raise RuntimeError(f"node {node.name}: no free pod IPs left in {self.addresses.pod_cidr}")

    def _lookup(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self.informers[kind].get(namespace, name)

    def _token(self, pod: Obj, projection: Obj) -> tuple[str, float]:
        meta = pod["metadata"]
        spec: Obj = {
            "expirationSeconds": int(projection.get("expirationSeconds", 3600)),
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"], "uid": meta["uid"]},
        }
        if projection.get("audience"):
            spec["audiences"] = [projection["audience"]]
        account = pod["spec"].get("serviceAccountName") or "default"
        result = self.core.create_namespaced_service_account_token(account, meta["namespace"], {"spec": spec})
        return str(result.status.token), result.status.expiration_timestamp.timestamp()

    def _patch_status(self, namespace: str, name: str, status: Obj) -> bool:
        """Whether the status was delivered (or can never be): False while the apiserver is out of
        reach, so the pod runner sends it again on its next tick."""
        try:
            self.core.patch_namespaced_pod_status(name, namespace, {"status": status})
        except ApiException as err:
            if err.status != 404:
                log.warning("status update for %s/%s failed: %s", namespace, name, err.reason)
        except CONNECTION_ERRORS as err:
            log.warning("status update for %s/%s not delivered, will retry: %s", namespace, name, err)
            return False
        return True

    def _locate_log(self, namespace: str, pod: str, container: str, previous: bool) -> Path | None:
        for runner in list(self.runners.values()):
            if (runner.namespace, runner.name) == (namespace, pod):
                for c in [*runner.init_containers, *runner.containers]:
                    if c.name == container:
                        restart = c.restart_count - 1 if previous else c.restart_count
                        return runner.log_dir / f"{container}.{restart}.log"
        return None
