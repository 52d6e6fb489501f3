"""Every address the local cluster hands out lies in 198.18.0.0/15 (RFC 2544's benchmark range), both
ranges are routed into the cluster's own namespace, and a pod's `localhost` is its own."""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess

import pytest
from kubernetes import client

from kvant_dev.network import TEST_RANGE
from tests.integration.workloads import pod, python_container
from tests.kube_wait import wait_for

pytestmark = pytest.mark.cluster

# Listens on the pod's loopback only, then reports whether 127.0.0.1:PORT answers from where it runs.
LOOPBACK_LISTENER = """
import http.server, threading
server = http.server.HTTPServer(('127.0.0.1', 9999), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
http.server.HTTPServer(('0.0.0.0', 8080), http.server.SimpleHTTPRequestHandler).serve_forever()
"""
LOOPBACK_PROBE = """
import socket, time
time.sleep(1)
try:
    socket.create_connection(('127.0.0.1', 9999), timeout=2).close()
    print('reached')
except OSError as err:
    print('refused', err)
"""


def test_service_range_and_pod_ips_lie_in_the_benchmark_range(cluster):
    core = client.CoreV1Api(cluster.api_client())
    service_cidr = ipaddress.ip_network(cluster.addresses.service_cidr)
    pod_cidr = ipaddress.ip_network(cluster.addresses.pod_cidr)
    assert service_cidr.subnet_of(TEST_RANGE) and pod_cidr.subnet_of(TEST_RANGE)  # type: ignore[arg-type]
    # What the apiserver itself allocates from: the default ServiceCIDR object and the first ClusterIP.
    cidrs = json.loads(cluster.kubectl("get", "servicecidrs", "-o", "json").stdout)["items"]
    assert [c["spec"]["cidrs"] for c in cidrs] == [[str(service_cidr)]]
    kubernetes = core.read_namespaced_service("kubernetes", "default")
    assert ipaddress.ip_address(kubernetes.spec.cluster_ip) in service_cidr
    (endpoint,) = json.loads(
        cluster.kubectl(
            "get",
            "endpointslices",
            "-n",
            "default",
            "-l",
            "kubernetes.io/service-name=kubernetes",
            "-o",
            "json",
        ).stdout
    )["items"]
    assert ipaddress.ip_address(endpoint["endpoints"][0]["addresses"][0]) in TEST_RANGE

    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps(pod("addressed", python_container("main", LOOPBACK_LISTENER)))
    )
    ip = wait_for(lambda: core.read_namespaced_pod("addressed", "default").status.pod_ip, 60, "a pod IP")
    assert ipaddress.ip_address(ip) in pod_cidr
    for pod_obj in core.list_pod_for_all_namespaces().items:
        if pod_obj.status.pod_ip:
            assert ipaddress.ip_address(pod_obj.status.pod_ip) in TEST_RANGE, pod_obj.metadata.name
    cluster.kubectl("delete", "pod", "addressed", "--wait=false")


def test_both_ranges_route_into_the_cluster_and_nothing_routes_out_of_it(cluster):
    # Inside the node namespace (where every pod's traffic is routed): its own subnets only.
    inside = subprocess.run(
        ["nsenter", f"--net={cluster.network.netns}", "--", "ip", "-4", "route", "show"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "default" not in inside, f"the node namespace must not route anywhere else:\n{inside}"
    for line in inside.splitlines():
        first = line.split()[1] if line.startswith("unreachable") else line.split()[0]
        assert ipaddress.ip_network(first).subnet_of(TEST_RANGE), line  # type: ignore[arg-type]
    # On the host: both ranges into the cluster's link, the rest of the /15 fenced.
    routes = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True, check=True).stdout
    assert f"unreachable {TEST_RANGE}" in routes, "the whole range is fenced on the host"
    for line in routes.splitlines():
        first = line.split()[0]
        if (
            first not in ("default", "unreachable")
            and "/" in first
            and ipaddress.ip_network(first).overlaps(TEST_RANGE)
        ):
            assert " dev kvant" in line, f"a route into the test range leaves by another device: {line}"


def test_localhost_inside_a_pod_is_that_pods_alone(cluster):
    core = client.CoreV1Api(cluster.api_client())
    listener = pod(
        "loopback-owner",
        python_container(
            "listen", LOOPBACK_LISTENER, readinessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1}
        ),
        restartPolicy="Never",
    )
    cluster.kubectl("apply", "-f", "-", input=json.dumps(listener))
    wait_for(lambda: _ready(core, "loopback-owner"), 60, "the loopback listener to run")
    # A second container of the same pod shares its localhost; another pod and the host do not.
    same_pod = pod(
        "loopback-sibling",
        python_container("listen", LOOPBACK_LISTENER),
        python_container("probe", LOOPBACK_PROBE),
        restartPolicy="Never",
    )
    other_pod = pod("loopback-stranger", python_container("probe", LOOPBACK_PROBE), restartPolicy="Never")
    for spec in (same_pod, other_pod):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(spec))

    def said(name: str, container: str) -> str | None:
        out = cluster.kubectl("logs", name, "-c", container, check=False).stdout.strip()
        return out or None

    assert wait_for(lambda: said("loopback-sibling", "probe"), 60, "the sibling's probe") == "reached"
    assert wait_for(lambda: said("loopback-stranger", "probe"), 60, "the stranger's probe").startswith(
        "refused"
    )
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", 9999), timeout=2).close()
    for name in ("loopback-owner", "loopback-sibling", "loopback-stranger"):
        cluster.kubectl("delete", "pod", name, "--wait=false")


def _ready(core: client.CoreV1Api, name: str) -> bool:
    conditions = core.read_namespaced_pod(name, "default").status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)
