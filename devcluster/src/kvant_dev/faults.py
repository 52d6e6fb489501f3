"""Faults to inject into a local cluster, for tests and soaks that check Kvant keeps serving through them.

Each action is one thing a real cluster suffers: a container's process dies (an OOM kill, a segfault),
a pod is deleted (an eviction, a drain), etcd or kube-apiserver crashes and its supervisor starts it
again. The operator is not here: it runs beside the cluster, and its owner (e2e's OperatorProcess)
kills and restarts it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from kubernetes import client

from kvant_dev.cluster import LocalCluster
from kvant_dev.nodeagent.podrunner import pod_dir

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


def crash_control_plane(cluster: LocalCluster, name: str) -> None:
    """SIGKILLs etcd or kube-apiserver and starts it again with the same flags and data, as a
    supervisor would; returns once the apiserver answers /readyz again."""
    cluster.control_plane.restart_core(name, grace_seconds=0.0)


def _stdout_of(pid: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/fd/1"))
    except OSError:  # gone already
        return None
