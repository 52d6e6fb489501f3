"""HTTP and TCP probes with the kubelet's period/threshold bookkeeping."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from kvant_contracts.kube_object import Obj


def _port(value: int | str, container: Obj) -> int:
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    for port in container.get("ports", []):
        if port.get("name") == value:
            return int(port["containerPort"])
    raise ValueError(f"probe port {value!r} is not a named port of container {container['name']}")


def check_once(probe: Obj, container: Obj, pod_ip: str) -> bool:
    timeout = float(probe.get("timeoutSeconds", 1))
    if "httpGet" in probe:
        get = probe["httpGet"]
        host = get.get("host") or pod_ip
        scheme = get.get("scheme", "HTTP").lower()
        url = f"{scheme}://{host}:{_port(get['port'], container)}{get.get('path', '/')}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return 200 <= int(response.status) < 400
        except (urllib.error.URLError, OSError, ValueError):
            return False
    if "tcpSocket" in probe:
        tcp = probe["tcpSocket"]
        try:
            with socket.create_connection(
                (tcp.get("host") or pod_ip, _port(tcp["port"], container)), timeout
            ):
                return True
        except OSError:
            return False
    raise ValueError(f"container {container['name']}: only httpGet and tcpSocket probes run locally")


@dataclass
class ProbeState:
    """Tracks one probe of one running container: when it is due and what it concluded."""

    probe: Obj
    started_at: float
    passed: bool = False
    successes: int = 0
    failures: int = 0
    next_due: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.next_due = self.started_at + float(self.probe.get("initialDelaySeconds", 0))

    def step(self, container: Obj, pod_ip: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if now < self.next_due:
            return
        self.next_due = now + float(self.probe.get("periodSeconds", 10))
        if check_once(self.probe, container, pod_ip):
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= int(self.probe.get("successThreshold", 1)):
                self.passed = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.failures >= int(self.probe.get("failureThreshold", 3)):
                self.passed = False

    @property
    def failed_out(self) -> bool:
        return self.failures >= int(self.probe.get("failureThreshold", 3))
