"""The local cluster's network: a node network namespace with the pod bridge, linked to the host.

Every address comes from 198.18.0.0/15, the range RFC 2544 reserves for benchmark testing, so
nothing the cluster sends can ever be meant for a real network:

    slot S (1..62, one per running cluster on this machine)
      pods       198.18.S.0/24   on the bridge `kvant0` inside the node namespace; gateway .1
      Services   198.19.4S.0/22  ClusterIPs (1,022: a model has a Service per role, and the operator
                               bench runs 1,000 models), made real by kube-proxy in the node namespace
      host link  198.19.255.4S/30  host side .4S+1 (the apiserver listens here), node side .4S+2

The node namespace is held by a `sleep` process (like a pause container); when it dies the kernel
removes the namespace, its bridge, its veths and the host routes through them. The host gets one
route per range via the link, and an `unreachable` route for the whole /15, so that traffic to any
of these addresses stays on this machine even while no cluster (or no kube-proxy) is up. The node
namespace has no default route and there is no NAT, so no address outside the cluster is reachable
from a pod, whatever the host's own forwarding says.

Why a namespace per cluster rather than a bridge on the host: kube-proxy's nftables table has a fixed
name, so two clusters on one machine (the demo beside the test suite) need two network stacks.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kvant_dev.process import ManagedProcess

TEST_RANGE = ipaddress.ip_network("198.18.0.0/15")
_LINK_BLOCK = "198.19.255"
MAX_SLOT = 62  # /30 links in 198.19.255.0/24
BRIDGE = "kvant0"
_OWNER = re.compile(r"kvant-dev pid=(\d+)")


class NetworkSetupError(RuntimeError):
    """The cluster network could not be built; the message says which command failed and why."""


def run_ip(*argv: str, netns: Path | None = None) -> str:
    """Runs an `ip`/`sysctl`-style command on the host, or inside the namespace at `netns`."""
    full = ["nsenter", f"--net={netns}", "--", *argv] if netns else list(argv)
    result = subprocess.run(full, capture_output=True, text=True, check=False, timeout=30)
    if result.returncode != 0:
        raise NetworkSetupError(f"`{' '.join(argv)}` failed: {result.stderr.strip() or result.returncode}")
    return result.stdout


@dataclass(frozen=True)
class Addresses:
    """The addresses of one cluster slot (see the module docstring)."""

    slot: int

    @property
    def pod_cidr(self) -> str:
        return f"198.18.{self.slot}.0/24"

    @property
    def service_cidr(self) -> str:
        return f"198.19.{4 * self.slot}.0/22"  # slot 62 ends at 198.19.251.255, below the links

    @property
    def gateway(self) -> str:
        return f"198.18.{self.slot}.1"

    @property
    def kubernetes_service_ip(self) -> str:
        """The first address of the Service range: the apiserver's own `kubernetes` Service."""
        return f"198.19.{4 * self.slot}.1"

    @property
    def host_ip(self) -> str:
        return f"{_LINK_BLOCK}.{4 * self.slot + 1}"

    @property
    def node_ip(self) -> str:
        return f"{_LINK_BLOCK}.{4 * self.slot + 2}"

    @property
    def host_link(self) -> str:
        return f"kvant{self.slot}"

    @property
    def node_link(self) -> str:
        return f"kvant{self.slot}n"

    def pod_ips(self) -> list[str]:
        return [f"198.18.{self.slot}.{host}" for host in range(2, 255)]


class ClusterNetwork:
    """Builds, and tears down, the network of one local cluster."""

    def __init__(self, state_dir: Path, tied_to_parent: bool) -> None:
        self.state_dir = state_dir
        self.tied_to_parent = tied_to_parent
        self.addresses: Addresses | None = None
        self.holder: ManagedProcess | None = None

    @property
    def netns(self) -> Path:
        """The node namespace, as a path other processes can enter (`nsenter --net=`)."""
        if self.holder is None:
            raise NetworkSetupError("the cluster network is not up")
        return Path(f"/proc/{self.holder.pid}/ns/net")

    def up(self) -> Addresses:
        addresses = self._claim_slot()
        self.addresses = addresses
        try:
            self.holder = ManagedProcess(
                "node-netns",
                ["unshare", "--net", "--", "sleep", "infinity"],
                self.state_dir / "logs" / "node-netns.log",
                tied_to_parent=self.tied_to_parent,
            )
            wait_for_new_netns(self.holder.pid)
            self._configure(addresses, self.holder.pid)
        except BaseException:
            self.down()
            raise
        return addresses

    def down(self) -> None:
        if self.holder is not None:
            self.holder.stop(grace_seconds=2.0)
            self.holder = None
        if self.addresses is not None:
            with contextlib.suppress(NetworkSetupError):  # gone with the namespace already
                run_ip("ip", "link", "del", self.addresses.host_link)
            self.addresses = None
        release_test_range_guard()

    def _claim_slot(self) -> Addresses:
        """The first free slot; the host veth's name is the lock (creating it is atomic)."""
        for slot in range(1, MAX_SLOT + 1):
            addresses = Addresses(slot)
            if _try_create_link(addresses) or (_reclaim_stale(addresses) and _try_create_link(addresses)):
                owner = f"kvant-dev pid={os.getpid()} {self.state_dir}"
                run_ip("ip", "link", "set", addresses.host_link, "alias", owner[:255])  # IFALIASZ
                return addresses
        raise NetworkSetupError(f"all {MAX_SLOT} local cluster network slots are in use (`ip link show`)")

    def _configure(self, a: Addresses, holder_pid: int) -> None:
        ns = self.netns
        run_ip("ip", "link", "set", a.node_link, "netns", str(holder_pid))
        run_ip("ip", "addr", "add", f"{a.host_ip}/30", "dev", a.host_link)
        run_ip("ip", "link", "set", a.host_link, "up")
        for argv in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "addr", "add", f"{a.node_ip}/30", "dev", a.node_link],
            ["ip", "link", "set", a.node_link, "up"],
            ["ip", "link", "add", BRIDGE, "type", "bridge"],
            ["ip", "addr", "add", f"{a.gateway}/24", "dev", BRIDGE],
            ["ip", "link", "set", BRIDGE, "up"],
            # No default route: the pods, the Services and the host end of the link (apiserver,
            # Prometheus) are all the cluster reaches; any other address is unreachable right here,
            # whatever the host's own forwarding says.
            # A ClusterIP that kube-proxy has not (yet) translated is refused here, never bounced back.
            ["ip", "route", "add", "unreachable", a.service_cidr],
            # These sysctls are the node namespace's own: the host's forwarding stays as it is.
            ["sysctl", "-qw", "net.ipv4.ip_forward=1"],
            ["sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"],
        ):
            run_ip(*argv, netns=ns)
        run_ip("ip", "route", "replace", "unreachable", str(TEST_RANGE))
        run_ip("ip", "route", "add", a.pod_cidr, "via", a.node_ip)
        run_ip("ip", "route", "add", a.service_cidr, "via", a.node_ip)


def wait_for_new_netns(pid: int, timeout: float = 10.0) -> None:
    """Waits until `pid` has left this process's network namespace (unshare has run)."""
    own = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/ns/net") != own:
                return
        time.sleep(0.01)
    raise NetworkSetupError(f"process {pid} did not enter a new network namespace within {timeout:.0f}s")


def _try_create_link(addresses: Addresses) -> bool:
    try:
        run_ip("ip", "link", "add", addresses.host_link, "type", "veth", "peer", "name", addresses.node_link)
    except NetworkSetupError:
        return False
    return True


def _reclaim_stale(addresses: Addresses) -> bool:
    """Deletes a slot's veth left by a run killed while setting up; True if it did.

    Once the node end is inside a namespace, the pair lives exactly as long as that namespace's
    holder, so only a pair with both ends still on the host, whose claimer is dead, can be stale.
    """
    try:
        shown = run_ip("ip", "-o", "link", "show", addresses.host_link)
    except NetworkSetupError:
        return False
    if f"@{addresses.node_link}" not in shown:
        return False
    owner = _OWNER.search(shown)
    if owner is not None and Path(f"/proc/{owner.group(1)}").exists():
        return False  # being set up right now
    with contextlib.suppress(NetworkSetupError):
        run_ip("ip", "link", "del", addresses.host_link)
    return True


def release_test_range_guard() -> None:
    """Removes the host's `unreachable 198.18.0.0/15` once no local cluster's link is left."""
    links = run_ip("ip", "-o", "link", "show")
    if re.search(r"^\d+: kvant\d+[@:]", links, re.MULTILINE):
        return
    with contextlib.suppress(NetworkSetupError):
        run_ip("ip", "route", "del", "unreachable", str(TEST_RANGE))


def in_test_range(address: str) -> bool:
    return ipaddress.ip_address(address) in TEST_RANGE
