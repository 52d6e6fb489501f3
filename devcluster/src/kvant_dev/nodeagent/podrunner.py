"""Runs one pod's containers as processes and reports its status, like the kubelet's pod worker."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvant_contracts.kube_object import Obj
from kvant_dev.dns import hosts_file, resolv_conf
from kvant_dev.network import NetworkSetupError
from kvant_dev.nodeagent.container import Container, rfc3339, stop_all
from kvant_dev.nodeagent.fieldrefs import EnvError, Lookup, container_env
from kvant_dev.nodeagent.images import LocalImage, UnsupportedImageError, resolve
from kvant_dev.nodeagent.rootfs import Mount, MountError, resolve_mount_path, root_view_argv, sub_path
from kvant_dev.nodeagent.sandbox import PodNetwork, PodSandbox
from kvant_dev.nodeagent.volumes import PodVolumes, TokenSource, VolumeNotReadyError
from kvant_dev.releases import python_path

log = logging.getLogger("kvant.nodeagent.pod")


@dataclass
class PodContext:
    """What every pod worker on this agent shares."""

    lookup: Lookup
    token_source: TokenSource
    image_map: dict[str, LocalImage]
    base_env: Callable[[str], dict[str, str]]  # namespace -> PATH, HOME, Service variables...
    root: Path  # the agent's folder: pods/ below it
    node_root: Path  # the nodes' filesystem: hostPath and local PV paths resolve below it
    network: PodNetwork
    submounts: list[str]  # the host's mounts each container root carries (see rootfs)
    tied_to_parent: bool
    patch_status: Callable[[str, str, Obj], bool]  # False: not delivered (apiserver away), send again
    projection_delay: float  # seconds before a ConfigMap or Secret change reaches a volume (see volumes)


def pod_dir(root: Path, namespace: str, name: str, uid: str) -> Path:
    """A pod's folder below the agent's root: its volumes, logs and container roots."""
    return root / "pods" / f"{namespace}_{name}_{uid}"


class PodRunner:
    def __init__(self, pod: Obj, pod_ip: str, host_ip: str, ctx: PodContext) -> None:
        self.pod = pod
        self.pod_ip, self.host_ip = pod_ip, host_ip
        self.ctx = ctx
        meta = pod["metadata"]
        self.namespace, self.name = meta["namespace"], meta["name"]
        self.dir = pod_dir(ctx.root, self.namespace, self.name, meta["uid"])
        self.volumes = PodVolumes(
            pod, self.dir, ctx.node_root, ctx.lookup, ctx.token_source, ctx.projection_delay
        )
        hostname = str(pod["spec"].get("hostname") or self.name)[:63]
        self.sandbox = PodSandbox(
            meta["uid"], hostname, pod_ip, ctx.network, log_dir=self.log_dir, tied=ctx.tied_to_parent
        )
        self.init_containers: list[Container] = []
        self.containers: list[Container] = []
        self.waiting: Obj | None = {"reason": "ContainerCreating"}
        self.prepared = False
        self.start_time = rfc3339()
        self._sent: str = ""

    @property
    def restart_policy(self) -> str:
        return str(self.pod["spec"].get("restartPolicy", "Always"))

    @property
    def log_dir(self) -> Path:
        return self.dir / "logs"

    def tick(self) -> None:
        if not self.prepared:
            # As a kubelet syncs a pod's status before it starts its containers: a pod this agent
            # starts again (after its own restart, or a node's) still reads Ready from before, and
            # its Service and router would send requests to containers that have only just started
            # (a restarted router answered them before it knew any engine).
            self.report()
            self._prepare()
        if self.prepared and self.phase() not in ("Succeeded", "Failed"):
            self.volumes.refresh()
            self._step_containers()
        if self.phase() in ("Succeeded", "Failed"):
            self.sandbox.destroy()  # nothing runs any more: give the pod's network back
        self.report()

    def terminate(self, grace_seconds: float) -> None:
        stop_all([*self.init_containers, *self.containers], grace_seconds, "Killed")
        self.sandbox.destroy()

    def phase(self) -> str:
        if not self.prepared or not self._inits_done():
            return self._init_phase()
        states = [c.finished for c in self.containers]
        if any(c.process is not None and c.process.running() for c in self.containers):
            return "Running"
        if all(s is not None for s in states) and self.restart_policy != "Always":
            failed = any(s is not None and s["exitCode"] != 0 for s in states)
            if not failed:
                return "Succeeded"
            if self.restart_policy == "Never":
                return "Failed"
        return "Running" if any(c.started_at for c in self.containers) else "Pending"

    def _inits_done(self) -> bool:
        return all(c.finished is not None and c.finished["exitCode"] == 0 for c in self.init_containers)

    def _init_phase(self) -> str:
        failed = any(c.finished and c.finished["exitCode"] for c in self.init_containers)
        return "Failed" if failed and self.restart_policy == "Never" else "Pending"

    def _prepare(self) -> None:
        try:
            spec = self.pod["spec"]
            self.init_containers = [self._container(c) for c in spec.get("initContainers", [])]
            self.containers = [self._container(c) for c in spec["containers"]]
            self.volumes.setup()
            self.dir.mkdir(parents=True, exist_ok=True)
            self.sandbox.create()
        except UnsupportedImageError as err:
            self.waiting = {"reason": "ErrImagePull", "message": str(err)}
            return
        except VolumeNotReadyError as err:
            self.waiting = {"reason": "ContainerCreating", "message": str(err)}
            return
        except NetworkSetupError as err:
            self.waiting = {"reason": "ContainerCreating", "message": f"FailedCreatePodSandBox: {err}"}
            return
        self.prepared, self.waiting = True, None

    def _container(self, spec: Obj) -> Container:
        return Container(spec, resolve(spec["image"], self.ctx.image_map), self.log_dir)

    def _step_containers(self) -> None:
        pending_init = [c for c in self.init_containers if c.finished is None or c.finished["exitCode"]]
        if pending_init:
            self._run_one(pending_init[0], init=True)
            return
        for container in self.containers:
            self._run_one(container, init=False)

    def _run_one(self, container: Container, init: bool) -> None:
        code = container.poll_exit()
        if code is not None:
            # Init containers rerun only after a failure; app containers follow restartPolicy.
            retry_init = init and code != 0 and self.restart_policy != "Never"
            if retry_init or (not init and self._should_restart(code)):
                container.schedule_restart()
            return
        if (
            container.process is None
            and container.finished is None
            and time.monotonic() >= container.next_start
        ):
            self._start(container)
            return
        if container.process is not None and not init:
            reason = container.step_probes(self.pod_ip)
            if reason:
                container.kill(float(self.pod["spec"].get("terminationGracePeriodSeconds", 30)), reason)
                container.schedule_restart()

    def _should_restart(self, code: int) -> bool:
        policy = self.restart_policy
        return policy == "Always" or (policy == "OnFailure" and code != 0)

    def _start(self, container: Container) -> None:
        try:
            env = container_env(
                self._pod_with_ips(), container.spec, self.ctx.lookup, self._base_env(container.image)
            )
        except EnvError as err:
            container.last_state = {}
            self.waiting = {"reason": "CreateContainerConfigError", "message": str(err)}
            return
        try:
            mounts = self._mounts(container)
        except MountError as err:
            self.waiting = {"reason": "CreateContainerConfigError", "message": str(err)}
            return
        root = self.dir / "roots" / f"{container.name}.{container.restart_count}"
        root.mkdir(parents=True, exist_ok=True)
        workdir = str(container.spec.get("workingDir") or "/")
        isolation = self.sandbox.enter() + root_view_argv(root, mounts, workdir, self.ctx.submounts)
        container.start(env, isolation, self.dir, self.ctx.tied_to_parent)
        self.waiting = None
        log.info(
            "started %s/%s container %s (restart %d)",
            self.namespace,
            self.name,
            container.name,
            container.restart_count,
        )

    def _mounts(self, container: Container) -> list[Mount]:
        mounts = self._name_files()
        for mount in container.spec.get("volumeMounts", []):
            host = self.volumes.host_paths[mount["name"]]
            if mount.get("subPath"):
                host = sub_path(host, mount["subPath"])
            read_only = bool(mount.get("readOnly")) or self.volumes.read_only.get(mount["name"], False)
            mounts.append(Mount(host, resolve_mount_path(mount["mountPath"]), read_only))
        return mounts

    def _name_files(self) -> list[Mount]:
        """/etc/hosts, and /etc/resolv.conf for ClusterFirst pods, written for the pod as the kubelet does."""
        etc = self.dir / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(hosts_file(self.pod_ip, self.sandbox.hostname))
        mounts = [Mount(etc / "hosts", resolve_mount_path("/etc/hosts"), read_only=True)]
        nameserver = self.ctx.network.cluster_dns
        if nameserver and self.pod["spec"].get("dnsPolicy", "ClusterFirst").startswith("ClusterFirst"):
            (etc / "resolv.conf").write_text(resolv_conf(self.namespace, nameserver))
            mounts.append(Mount(etc / "resolv.conf", resolve_mount_path("/etc/resolv.conf"), read_only=True))
        return mounts

    def _base_env(self, image: LocalImage) -> dict[str, str]:
        # A container's HOME is in its own filesystem; here it is the pod's folder, so what a process
        # keeps under ~ (SGLang's ~/.cache/sglang, kubectl's ~/.kube) never lands in the host's home.
        home = self.dir / "home"
        home.mkdir(parents=True, exist_ok=True)
        env = {**self.ctx.base_env(self.namespace), "HOSTNAME": self.sandbox.hostname, "HOME": str(home)}
        if image.bin_dir is not None:  # an image with an environment of its own: its Python first
            env["PATH"] = f"{image.bin_dir}:{env['PATH']}"
        if image.source_tree is not None:  # an earlier commit's image: its packages ahead of this checkout's
            env["PYTHONPATH"] = python_path(image.source_tree)
        return env

    def _pod_with_ips(self) -> Obj:
        return {
            **self.pod,
            "status": {**self.pod.get("status", {}), "podIP": self.pod_ip, "hostIP": self.host_ip},
        }

    def report(self) -> None:
        status = self._status()
        encoded = json.dumps(status, sort_keys=True)
        if encoded != self._sent and self.ctx.patch_status(self.namespace, self.name, status):
            self._sent = encoded

    def _status(self) -> Obj:
        phase = self.phase()
        container_statuses = [self._container_status(c) for c in self.containers]
        if not self.containers:
            container_statuses = [self._waiting_status(c) for c in self.pod["spec"]["containers"]]
        all_ready = bool(self.containers) and all(c.ready for c in self.containers)
        terminal = phase in ("Succeeded", "Failed")
        ready_reason = "PodCompleted" if terminal else ("" if all_ready else "ContainersNotReady")
        status: Obj = {
            "phase": phase,
            "hostIP": self.host_ip,
            "hostIPs": [{"ip": self.host_ip}],
            "podIP": self.pod_ip,
            # Replaced, not merged by IP (the list's strategic-merge key): a pod started afresh after
            # its node's loss has a new address, and two IPv4 addresses are refused (422).
            "podIPs": [{"$patch": "replace"}, {"ip": self.pod_ip}],
            "startTime": self.start_time,
            "conditions": [
                _condition("PodReadyToStartContainers", self.prepared),
                _condition("Initialized", self.prepared and self._inits_done()),
                _condition("ContainersReady", all_ready and not terminal, ready_reason),
                _condition("Ready", all_ready and not terminal, ready_reason),
            ],
            "containerStatuses": container_statuses,
        }
        if self.init_containers:
            status["initContainerStatuses"] = [c.status() for c in self.init_containers]
        return status

    def _container_status(self, container: Container) -> Obj:
        status = container.status()
        if self.waiting and container.process is None and container.finished is None:
            status["state"] = {"waiting": self.waiting}
        return status

    def _waiting_status(self, spec: Obj) -> Obj:
        return {
            "name": spec["name"],
            "image": spec["image"],
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {"waiting": self.waiting or {"reason": "ContainerCreating"}},
        }


def _condition(kind: str, ok: bool, reason: str = "") -> Obj:
    condition: Obj = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None}
    if reason and not ok:
        condition["reason"] = reason
    return condition
