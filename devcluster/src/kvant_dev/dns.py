"""Cluster DNS: CoreDNS's configuration, and the resolv.conf and hosts files a pod gets.

CoreDNS runs in the node namespace on the pod gateway's address, as a node-local DNS cache does
on a real node, and answers `cluster.local` from the apiserver (its kubernetes plugin). It has no
forwarder: every other name is NXDOMAIN, so no query ever leaves this machine.
"""

from __future__ import annotations

from pathlib import Path

from kvant_dev.network import Addresses

CLUSTER_DOMAIN = "cluster.local"
READY_PORT = 8181


def corefile(addresses: Addresses, kubeconfig: Path) -> str:
    return f"""\
{CLUSTER_DOMAIN}:53 {{
    bind {addresses.gateway}
    errors
    ready {addresses.node_ip}:{READY_PORT}
    kubernetes {CLUSTER_DOMAIN} {{
        kubeconfig {kubeconfig}
    }}
}}
.:53 {{
    bind {addresses.gateway}
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""


def resolv_conf(namespace: str, nameserver: str, domain: str = CLUSTER_DOMAIN) -> str:
    """A ClusterFirst pod's resolv.conf, as the kubelet writes it."""
    search = f"{namespace}.svc.{domain} svc.{domain} {domain}"
    return f"search {search}\nnameserver {nameserver}\noptions ndots:5\n"


def hosts_file(pod_ip: str, hostname: str) -> str:
    """A pod's /etc/hosts, as the kubelet writes it."""
    return (
        "# Kubernetes-managed hosts file.\n"
        "127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        f"{pod_ip}\t{hostname}\n"
    )
