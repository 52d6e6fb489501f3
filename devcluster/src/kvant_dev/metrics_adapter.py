"""A real prometheus-adapter serving the custom metrics API (custom.metrics.k8s.io) from the cluster's
Prometheus, registered as an aggregated API, so a HorizontalPodAutoscaler can scale on the gates'
demand (kvant_contracts.autoscaling).

It runs on the host link like Prometheus, not as a pod: it needs no image, and the apiserver (on the
host, with --enable-aggregator-routing) dials the endpoint's IP itself. A selectorless Service whose
EndpointSlice names that address is how an APIService points at it, as in any cluster.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kvant_contracts.autoscaling import adapter_rule
from kvant_contracts.kube_object import Obj
from kvant_dev.netutil import free_port, http_ok, wait_until
from kvant_dev.process import ManagedProcess

NAMESPACE = "kvant-system"
SERVICE = "prometheus-adapter"
API_SERVICE = "v1beta1.custom.metrics.k8s.io"
_START_TIMEOUT = 60.0


@dataclass
class MetricsAdapter:
    binary: Path
    workdir: Path
    host: str  # the cluster's host link address: the apiserver reaches it there
    prometheus_url: str
    kubeconfig: Path
    tied_to_parent: bool = True
    port: int = 0
    process: ManagedProcess | None = field(default=None, repr=False)

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port(self.host)
        config = self.workdir / "adapter.yaml"
        config.write_text(yaml.safe_dump({"rules": [adapter_rule()]}))
        argv = [
            str(self.binary),
            f"--prometheus-url={self.prometheus_url}",
            f"--config={config}",
            # New pods' series are served within seconds (the default relist is 10 min).
            "--metrics-relist-interval=5s",
            f"--lister-kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--bind-address={self.host}",
            f"--secure-port={self.port}",
            # It writes a self-signed serving cert here (see the APIService below).
            f"--cert-dir={self.workdir / 'certs'}",
        ]
        self.process = ManagedProcess(
            "prometheus-adapter", argv, self.workdir / "adapter.log", tied_to_parent=self.tied_to_parent
        )
        wait_until(self._ready, _START_TIMEOUT, "prometheus-adapter /readyz", self.log_tail)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace_seconds=10.0)
            self.process = None

    def log_tail(self) -> str:
        return self.process.log_tail() if self.process else "(prometheus-adapter not running)"

    def registration(self) -> list[Obj]:
        """The namespace, selectorless Service, EndpointSlice and APIService that route
        custom.metrics.k8s.io through the apiserver to this process."""
        labels = {"app.kubernetes.io/name": SERVICE}
        return [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": SERVICE, "namespace": NAMESPACE, "labels": labels},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": self.port}]},
            },
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": SERVICE,
                    "namespace": NAMESPACE,
                    "labels": {**labels, "kubernetes.io/service-name": SERVICE},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [self.host], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": self.port, "protocol": "TCP"}],
            },
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": API_SERVICE, "labels": labels},
                "spec": {
                    "group": "custom.metrics.k8s.io",
                    "version": "v1beta1",
                    "service": {"name": SERVICE, "namespace": NAMESPACE, "port": 443},
                    # The adapter's serving cert is the self-signed one it makes in --cert-dir, so
                    # there is no CA to name in caBundle; the hop is the host link only.
                    "insecureSkipTLSVerify": True,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                },
            },
        ]

    def _ready(self) -> bool:
        if self.process is not None and not self.process.running():
            raise RuntimeError(f"prometheus-adapter exited during start-up:\n{self.log_tail()}")
        # Its cert is self-signed (see registration); this probe only asks whether it serves.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return http_ok(f"https://{self.host}:{self.port}/readyz", context)
