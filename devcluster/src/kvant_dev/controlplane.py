"""etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kvant_dev import pki
from kvant_dev.netutil import free_port, http_ok, wait_until
from kvant_dev.process import ManagedProcess
from kvant_dev.toolchain import Toolchain

SERVICE_CIDR = "10.96.0.0/16"
_START_TIMEOUT = 120.0


@dataclass
class ControlPlane:
    """The control-plane processes of one local cluster, rooted at `workdir`."""

    workdir: Path
    toolchain: Toolchain
    tied_to_parent: bool = True
    processes: dict[str, ManagedProcess] = field(default_factory=dict)
    apiserver_port: int = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def pki_dir(self) -> Path:
        return self.workdir / "pki"

    def log_path(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def start_core(self) -> None:
        """etcd and the apiserver: enough for CRDs, RBAC and the operator's reconcile logic."""
        self.apiserver_port = free_port()
        certs = pki.generate(self.pki_dir, ["127.0.0.1", "localhost", "10.96.0.1", "kubernetes.default.svc"])
        self._write_kubeconfig(certs)
        etcd_url = self._start_etcd()
        self._spawn("kube-apiserver", self._apiserver_argv(certs, etcd_url))
        wait_until(self._apiserver_ready, _START_TIMEOUT, "kube-apiserver /readyz", self.diagnostics)

    def start_controllers(self) -> None:
        """kube-controller-manager and kube-scheduler: needed wherever Deployments, Jobs or pods matter."""
        certs_dir = self.pki_dir
        self._spawn(
            "kube-controller-manager",
            [
                str(self.toolchain.kube_controller_manager),
                *self._component_flags(),
                "--use-service-account-credentials=false",
                f"--service-account-private-key-file={certs_dir / 'sa.key'}",
                f"--root-ca-file={certs_dir / 'ca.crt'}",
                f"--cluster-signing-cert-file={certs_dir / 'ca.crt'}",
                f"--cluster-signing-key-file={certs_dir / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # Pods are processes on loopback: no cloud, no node IPAM, no kube-proxy.
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route",
                # Evict pods from a dead node agent quickly, so tests see it.
                "--node-monitor-grace-period=20s",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [str(self.toolchain.kube_scheduler), *self._component_flags()],
        )

    def _component_flags(self) -> list[str]:
        """What the controller-manager and the scheduler share: credentials, loopback serving, no election."""
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--leader-elect=false",
        ]

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self.processes.pop(name).stop(grace_seconds=10.0)

    def diagnostics(self, lines: int = 30) -> str:
        parts = []
        for name, proc in self.processes.items():
            state = "running" if proc.running() else f"exited {proc.popen.returncode}"
            parts.append(
                f"--- {name} ({state}), last {lines} lines of {proc.log_path} ---\n{proc.log_tail(lines)}"
            )
        return "\n".join(parts)

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        ctx.load_cert_chain(str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))
        return ctx

    def _apiserver_ready(self) -> bool:
        proc = self.processes["kube-apiserver"]
        if not proc.running():
            raise RuntimeError(f"kube-apiserver exited during start-up:\n{proc.log_tail(60)}")
        return http_ok(f"{self.url}/readyz", self.ssl_context())

    def _start_etcd(self) -> str:
        client_port, peer_port = free_port(), free_port()
        client_url = f"http://127.0.0.1:{client_port}"
        self._spawn(
            "etcd",
            [
                str(self.toolchain.etcd),
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                # Test data is disposable; skipping fsync keeps 2-core CI fast.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        wait_until(lambda: http_ok(f"{client_url}/health"), _START_TIMEOUT, "etcd /health", self.diagnostics)
        return client_url

    def _apiserver_argv(self, certs: pki.ClusterPKI, etcd_url: str) -> list[str]:
        return [
            str(self.toolchain.kube_apiserver),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.pki_dir}",
            f"--tls-cert-file={certs.apiserver.cert}",
            f"--tls-private-key-file={certs.apiserver.key}",
            f"--client-ca-file={certs.ca.cert}",
            # Controllers look this bundle up at start; without it they log an error every few seconds.
            f"--requestheader-client-ca-file={certs.ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--service-account-key-file={certs.service_account_pub}",
            f"--service-account-signing-key-file={certs.service_account_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--endpoint-reconciler-type=none",
            # The node agent serves pod logs over HTTPS like a kubelet; the apiserver proxies to it.
            f"--kubelet-client-certificate={certs.admin.cert}",
            f"--kubelet-client-key={certs.admin.key}",
            "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=true",
        ]

    def _write_kubeconfig(self, certs: pki.ClusterPKI) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kvant-local",
                    "cluster": {"server": self.url, "certificate-authority": str(certs.ca.cert)},
                }
            ],
            "users": [
                {
                    "name": "kvant-admin",
                    "user": {"client-certificate": str(certs.admin.cert), "client-key": str(certs.admin.key)},
                }
            ],
            "contexts": [
                {"name": "kvant-local", "context": {"cluster": "kvant-local", "user": "kvant-admin"}}
            ],
            "current-context": "kvant-local",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def _spawn(self, name: str, argv: list[str]) -> None:
        self.processes[name] = ManagedProcess(
            name, argv, self.log_path(name), tied_to_parent=self.tied_to_parent
        )
