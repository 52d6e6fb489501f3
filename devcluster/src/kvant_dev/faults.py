"""Faults to inject into a local cluster, for tests and soaks that check Kvant keeps serving through them.

Each action is one thing a real cluster suffers: a container's process dies (an OOM kill, a segfault),
a pod is deleted (an eviction), a node is drained (cordon, then evictions through the PDBs), etcd or
kube-apiserver crashes and its supervisor starts it again, the node agent (the kubelet's stand-in)
crashes and is started again, Prometheus or the S3 store goes away for a while, a volume fills up. A
node's loss and restart are the cluster's own (LocalCluster.lose_node, restore_node). The operator
is not here: it runs beside the cluster, and its owner (kvant_dev.operator_process.OperatorProcess)
kills and restarts it.

An action that starts a process again starts it from the calling thread, and the local cluster ties
each process to the thread that started it (setpriv's parent-death signal is per thread): call them
from a thread that outlives the cluster (the main thread, or a long-lived pool), or the restarted
process is SIGKILLed as soon as that thread ends.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kvant_dev.cluster import LocalCluster
from kvant_dev.model_stores import ModelStores
from kvant_dev.nodeagent.podrunner import pod_dir
from kvant_dev.prometheus import Prometheus

_CONTAINER_ID_PREFIX = "kvant-local://"  # the node agent's containerID: the container's process group


class FaultError(RuntimeError):
    """A fault could not be injected as asked (the target is not there, or not what it should be)."""


def kill_container(cluster: LocalCluster, namespace: str, pod: str, container: str) -> int:
    """SIGKILLs one running container of a pod (its whole process group) and returns its pid. The node
    agent sees it exit and restarts it, as a kubelet would: the container's restartCount goes up by one.

    The pid comes from the pod's status, so before the kill the process is checked to be that run of
    that container: its stdout is the log the node agent opened for it in the pod's folder, which a
    stale status (the container restarted since) or a reused pid would not have."""
    live = client.CoreV1Api(cluster.api_client()).read_namespaced_pod(pod, namespace)
    status = next((s for s in live.status.container_statuses or [] if s.name == container), None)
    container_id = (status.container_id or "") if status is not None else ""
    if status is None or not status.state.running or not container_id.startswith(_CONTAINER_ID_PREFIX):
        raise FaultError(f"pod {namespace}/{pod} has no running container {container!r} to kill")
    pid = int(container_id.removeprefix(_CONTAINER_ID_PREFIX))
    log = pod_dir(cluster.agent_dir, namespace, pod, live.metadata.uid) / "logs"
    log /= f"{container}.{status.restart_count}.log"  # see nodeagent.container: Container.start
    if _stdout_of(pid) != log.resolve() or os.getpgid(pid) != pid:
        raise FaultError(f"pid {pid} is no longer container {container!r} of {namespace}/{pod}; not killed")
    os.killpg(pid, signal.SIGKILL)
    return pid


def delete_pod(cluster: LocalCluster, namespace: str, pod: str) -> None:
    """Deletes a pod with its grace period, as an eviction or a drain does; its controller replaces it."""
    cluster.kubectl("delete", "pod", "-n", namespace, pod, "--wait=false")


def drain_node(cluster: LocalCluster, node: str, namespace: str, timeout: float = 240.0) -> tuple[int, int]:
    """`kubectl drain` for one namespace's pods on `node`: cordons it, then evicts each pod through the
    Eviction API, which refuses (429) while a PodDisruptionBudget allows no disruption, and tries the
    refused ones again every 2 s until all are taken. Returns (pods evicted, refusals). The node stays
    cordoned: uncordon it when the drain is over."""
    cluster.kubectl("cordon", node)
    core = client.CoreV1Api(cluster.api_client())
    pending = [p.metadata.name for p in core.list_namespaced_pod(namespace).items if p.spec.node_name == node]
    evicted, refused, deadline = len(pending), 0, time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            raise FaultError(f"the drain of {node} is stuck after {timeout:.0f} s on {pending}")
        for name in list(pending):
            eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
            try:
                core.create_namespaced_pod_eviction(name, namespace, eviction)
            except ApiException as err:
                if err.status == 429:  # a PodDisruptionBudget says not now
                    refused += 1
                    continue
                if err.status != 404:  # 404: gone already
                    raise
            pending.remove(name)
        if pending:
            time.sleep(2.0)
    return evicted, refused


def crash_control_plane(cluster: LocalCluster, name: str) -> None:
    """SIGKILLs etcd or kube-apiserver and starts it again with the same flags and data, as a
    supervisor would; returns once the apiserver answers /readyz again."""
    cluster.control_plane.restart_core(name, grace_seconds=0.0)


def crash_node_agent(cluster: LocalCluster) -> None:
    """SIGKILLs the node agent and starts it again with the same flags, as a supervisor restarts a
    crashed kubelet; returns once the new agent runs (its nodes and pods come back on their own).

    Unlike a kubelet, which finds its running containers again through the container runtime, the
    local agent holds its containers as child processes and cannot adopt them: they die with it (the
    cluster ties pods to the agent) and the new agent starts every container of every pod again, in
    the same pod objects. For the pods this fault is a reboot of every node, not a kubelet restart.
    Each pod keeps its address, as across a kubelet's restart (a lost node's pods, started again,
    get new ones: kvant_dev.nodeagent.agent)."""
    if cluster.node_agent is None:
        raise FaultError("the cluster runs no node agent (start_workloads was not called)")
    cluster.node_agent.restart(grace_seconds=0.0)


def stop_prometheus(cluster: LocalCluster) -> None:
    """Stops the cluster's Prometheus (SIGTERM, SIGKILL after 10 s): queries and scrapes fail until
    start_prometheus. Its data stays, so the series from before are there again after."""
    _prometheus(cluster).stop()


def start_prometheus(cluster: LocalCluster) -> None:
    """Starts the cluster's Prometheus again on the same address, config and data; returns once it
    answers /-/ready."""
    _prometheus(cluster).start()


def crash_s3(cluster: LocalCluster) -> None:
    """SIGKILLs the cluster's S3 server (SeaweedFS), as a crashed store: a fetch in flight has its
    connection cut mid-file, and every request fails until start_s3."""
    s3 = _stores(cluster).s3
    if s3.process is None:
        raise FaultError("the cluster's S3 server is not running")
    s3.process.stop(grace_seconds=0.0)
    s3.process = None


def start_s3(cluster: LocalCluster) -> None:
    """Starts the cluster's S3 server again on the same S3 address and data; returns once its gateway
    answers (objects written before the crash are served again)."""
    _stores(cluster).s3.start()


FILL_FILE = ".kvant-fault-fill"


def fill_volume(folder: Path, leave_bytes: int = 0, max_bytes: int = 2 << 30) -> Path:
    """Fills the filesystem that holds `folder` until `leave_bytes` are free, with one preallocated
    file `folder/.kvant-fault-fill`, and returns it: writes there then fail with ENOSPC, as on a full
    PersistentVolume, until free_volume. Refuses to write more than `max_bytes`, so it cannot fill a
    machine's disk by mistake: give it a small filesystem of its own (a size-limited tmpfs)."""
    stat = os.statvfs(folder)
    size = stat.f_bavail * stat.f_frsize - leave_bytes
    if size > max_bytes:
        raise FaultError(f"{folder} has {size} bytes to fill, more than max_bytes {max_bytes}; not filled")
    path = folder / FILL_FILE
    with path.open("wb") as file:
        if size > 0:
            os.posix_fallocate(file.fileno(), 0, size)
    return path


def free_volume(folder: Path) -> None:
    """Removes what fill_volume wrote into `folder`; writes succeed again."""
    (folder / FILL_FILE).unlink(missing_ok=True)


def _prometheus(cluster: LocalCluster) -> Prometheus:
    if cluster.prometheus is None:
        raise FaultError("the cluster runs no Prometheus (start_prometheus was not called)")
    return cluster.prometheus


def _stores(cluster: LocalCluster) -> ModelStores:
    if cluster.model_stores is None:
        raise FaultError("the cluster runs no model stores (start_model_stores was not called)")
    return cluster.model_stores


def _stdout_of(pid: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/fd/1"))
    except OSError:  # gone already
        return None
