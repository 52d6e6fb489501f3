"""A pod's sandbox: its own network namespace, wired to the node's bridge with one IP, and its own
UTS namespace, whose hostname is the pod's name.

Like a pause container, a `sleep` process holds the namespaces; every container of the pod joins them
(`nsenter --net --uts`), so they share `localhost`, the pod IP and the hostname, and nothing else does.
The namespaces and the veth vanish with the holder, so a crashed agent leaves nothing on the host.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from kvant_dev.network import BRIDGE, NetworkSetupError, run_ip, wait_for_new_netns
from kvant_dev.process import ManagedProcess

log = logging.getLogger("kvant.nodeagent.sandbox")


@dataclass(frozen=True)
class PodNetwork:
    """What every sandbox on this agent shares: the node namespace and the pod subnet's gateway."""

    node_netns: Path
    gateway: str
    cluster_dns: str | None = None
    prefix_length: int = 24


class PodSandbox:
    def __init__(
        self, uid: str, hostname: str, pod_ip: str, network: PodNetwork, *, log_dir: Path, tied: bool
    ) -> None:
        self.uid, self.hostname, self.pod_ip, self.network = uid, hostname, pod_ip, network
        self.log_dir, self.tied = log_dir, tied
        self.holder: ManagedProcess | None = None

    @property
    def netns(self) -> Path:
        return self._namespace("net")

    def _namespace(self, kind: str) -> Path:
        if self.holder is None:
            raise NetworkSetupError(f"pod {self.uid}: the sandbox is not running")
        return Path(f"/proc/{self.holder.pid}/ns/{kind}")

    @property
    def host_veth(self) -> str:
        """The bridge-side veth's name: unique per pod, within the 15 characters Linux allows."""
        return "kv" + hashlib.sha256(self.uid.encode()).hexdigest()[:12]

    def enter(self) -> list[str]:
        """argv prefix that runs a command inside the pod's network and UTS namespaces."""
        return ["nsenter", f"--net={self.netns}", f"--uts={self._namespace('uts')}", "--"]

    def create(self) -> None:
        self.holder = ManagedProcess(
            "pod-sandbox",
            ["unshare", "--net", "--uts", "--", "sleep", "infinity"],
            self.log_dir / "sandbox.log",
            tied_to_parent=self.tied,
        )
        try:
            wait_for_new_netns(self.holder.pid)
            node, pod = self.network.node_netns, self.netns
            run_ip(
                "ip", "link", "add", self.host_veth, "type", "veth",
                "peer", "name", "eth0", "netns", str(self.holder.pid),
                netns=node,
            )  # fmt: skip
            run_ip("ip", "link", "set", self.host_veth, "master", BRIDGE, "up", netns=node)
            for argv in (
                ["ip", "link", "set", "lo", "up"],
                ["ip", "addr", "add", f"{self.pod_ip}/{self.network.prefix_length}", "dev", "eth0"],
                ["ip", "link", "set", "eth0", "up"],
                ["ip", "route", "add", "default", "via", self.network.gateway],
            ):
                run_ip(*argv, netns=pod)
            run_ip("nsenter", f"--uts={self._namespace('uts')}", "--", "hostname", self.hostname)
        except BaseException:
            self.destroy()
            raise

    def destroy(self) -> None:
        """Stops the holder: the kernel then removes the namespace and both ends of its veth."""
        if self.holder is not None:
            with contextlib.suppress(OSError):
                self.holder.stop(grace_seconds=1.0)
            self.holder = None
