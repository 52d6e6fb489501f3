"""etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kube-proxy.

etcd and the controllers listen on loopback. The apiserver listens on the host's end of the cluster
link (see `network`), which pods reach through the `kubernetes` Service as in any cluster.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kvant_dev import dns, pki
from kvant_dev.netutil import free_port, http_ok, wait_until
from kvant_dev.network import Addresses
from kvant_dev.process import ManagedProcess
from kvant_dev.toolchain import Toolchain

_START_TIMEOUT = 120.0
KUBE_PROXY_HEALTH_PORT, KUBE_PROXY_METRICS_PORT = 10256, 10249


@dataclass
class ControlPlane:
    """The control-plane processes of one local cluster, rooted at `workdir`."""

    workdir: Path
    toolchain: Toolchain
    tied_to_parent: bool = True
    processes: dict[str, ManagedProcess] = field(default_factory=dict)
    apiserver_port: int = 0
    addresses: Addresses | None = None

    @property
    def net(self) -> Addresses:
        if self.addresses is None:
            raise RuntimeError("the control plane has not been started")
        return self.addresses

    @property
    def url(self) -> str:
        return f"https://{self.net.host_ip}:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def pki_dir(self) -> Path:
        return self.workdir / "pki"

    def log_path(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def start_core(self, addresses: Addresses) -> None:
        """etcd and the apiserver: enough for CRDs, RBAC and the operator's reconcile logic."""
        self.addresses = addresses
        self.apiserver_port = free_port(addresses.host_ip)
        names = [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ]
        certs = pki.generate(self.pki_dir, [addresses.host_ip, addresses.kubernetes_service_ip, *names])
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
                f"--service-cluster-ip-range={self.net.service_cidr}",
                # The node agent assigns pod IPs itself; there is no cloud to program routes or LBs in.
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route",
                # Evict pods from a dead node agent quickly, so tests see it.
                "--node-monitor-grace-period=20s",
                # The local cluster's choice: the default 15 s between HPA syncs would make the e2e
                # scale test slow; a real cluster keeps its own.
                "--horizontal-pod-autoscaler-sync-period=5s",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [str(self.toolchain.kube_scheduler), *self._component_flags()],
        )

    def start_kube_proxy(self, netns: Path, node_name: str, env: dict[str, str]) -> None:
        """kube-proxy in nftables mode inside the node namespace: it makes ClusterIPs real there.

        It runs in a private mount namespace too, so nothing it might write lands on the host.
        """
        net = self.net
        self._spawn(
            "kube-proxy",
            [
                "nsenter", f"--net={netns}", "--",
                "unshare", "--mount", "--propagation", "private", "--",
                str(self.toolchain.kube_proxy),
                f"--kubeconfig={self.kubeconfig}",
                "--proxy-mode=nftables",
                f"--hostname-override={node_name}",
                f"--cluster-cidr={net.pod_cidr}",
                f"--bind-address={net.node_ip}",  # the node's IP, for kube-proxy
                f"--healthz-bind-address={net.node_ip}:{KUBE_PROXY_HEALTH_PORT}",
                f"--metrics-bind-address={net.node_ip}:{KUBE_PROXY_METRICS_PORT}",
                # NodePorts answer on the node's link address only, never on another interface.
                f"--nodeport-addresses={net.node_ip}/32",
                # The conntrack table is the node namespace's own; leave the host's sysctls alone.
                "--conntrack-max-per-core=0",
            ],
            env=env,
        )  # fmt: skip
        health = f"http://{net.node_ip}:{KUBE_PROXY_HEALTH_PORT}/healthz"
        wait_until(lambda: http_ok(health), _START_TIMEOUT, "kube-proxy /healthz", self.diagnostics)

    def start_dns(self, netns: Path) -> None:
        """CoreDNS in the node namespace, on the pod gateway's address (see `dns`)."""
        config = self.workdir / "coredns" / "Corefile"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(dns.corefile(self.net, self.kubeconfig))
        self._spawn(
            "coredns",
            ["nsenter", f"--net={netns}", "--", str(self.toolchain.coredns), "-conf", str(config)],
        )
        ready = f"http://{self.net.node_ip}:{dns.READY_PORT}/ready"
        wait_until(lambda: http_ok(ready), _START_TIMEOUT, "CoreDNS /ready", self.diagnostics)

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

    def restart_core(self, name: str, grace_seconds: float = 0.0) -> None:
        """Restarts etcd or kube-apiserver with the same flags, ports and data, as a supervisor would
        after a crash (grace_seconds=0: SIGKILL), and returns once the apiserver is ready again. Their
        ports are fixed in their argv and etcd's data dir survives, so clients reconnect to the same
        cluster. (The other components would need their own readiness checks, so they are not offered.)"""
        if name not in ("etcd", "kube-apiserver"):
            raise ValueError(f"restart_core: {name!r} is neither etcd nor kube-apiserver")
        self.processes[name].restart(grace_seconds)
        wait_until(
            self._apiserver_ready,
            _START_TIMEOUT,
            f"kube-apiserver /readyz after restarting {name}",
            self.diagnostics,
        )

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
            f"--bind-address={self.net.host_ip}",
            f"--advertise-address={self.net.host_ip}",
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
            # Aggregated APIs (prometheus-adapter's custom metrics): the apiserver proxies to them with
            # this client cert, and dials the Service's endpoint IP itself rather than its ClusterIP,
            # which only the node namespace's kube-proxy makes real (the apiserver runs on the host).
            f"--proxy-client-cert-file={certs.front_proxy_client.cert}",
            f"--proxy-client-key-file={certs.front_proxy_client.key}",
            "--enable-aggregator-routing=true",
            f"--service-account-key-file={certs.service_account_pub}",
            f"--service-account-signing-key-file={certs.service_account_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-cluster-ip-range={self.net.service_cidr}",
            "--authorization-mode=Node,RBAC",
            # The `kubernetes` Service gets the apiserver as its endpoint, so pods reach it by ClusterIP.
            "--endpoint-reconciler-type=lease",
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

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.processes[name] = ManagedProcess(
            name, argv, self.log_path(name), env=env, tied_to_parent=self.tied_to_parent
        )
