"""Clients reach a model through its Service, as users and routers do: kube-proxy spreads them over
the replicas' gates, from the host and from pods alike, and no pod can reach an engine directly
(it listens on its pod's loopback, behind the gate)."""

from __future__ import annotations

import json
import urllib.request

import pytest
from kubernetes import client
from tests.integration.workloads import pod, python_container
from tests.kube_wait import wait_for

from e2e.qm import apply, metrics_url, service_url, serving_pods, wait_ready
from kvant_contracts import prometheus_text
from kvant_contracts.serving_pod import ENGINE_PORT, GATE_PORT

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

# Runs in another pod of the namespace: the model's Service by its name, then each replica's
# gate port and engine port by pod IP. Prints what it saw as one JSON line.
PROBE = """
import json, os, socket, urllib.request
def reach(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        return 'open'
    except OSError as err:
        return type(err).__name__
service = "http://door/generate"  # the Service's name, resolved by the cluster DNS
body = json.dumps({'text': 'hi', 'sampling_params': {'max_new_tokens': 2}}).encode()
answer = urllib.request.urlopen(urllib.request.Request(service, data=body), timeout=10)
pods = os.environ['REPLICA_IPS'].split(',')
print(json.dumps({
    'service': answer.status,
    'gate': [reach(ip, os.environ['GATE_PORT']) for ip in pods],
    'engine': [reach(ip, os.environ['ENGINE_PORT']) for ip in pods],
}))
"""


def _admitted(pod_obj: client.V1Pod) -> float:
    with urllib.request.urlopen(f"{metrics_url(pod_obj)}/metrics", timeout=5) as response:
        return prometheus_text.value(response.read().decode(), "kvant_gate_admitted_total") or 0.0


def _generate(url: str) -> int:
    body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 2}}).encode()
    request = urllib.request.Request(
        f"{url}/generate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


def _answers(url: str) -> bool:
    try:
        return _generate(url) == 200
    except OSError:
        return False


def test_service_spreads_clients_over_gates_and_engines_stay_unreachable(
    cluster, operator, namespace, tiny_model
):
    manifest = tiny_model("door", weights={"format": "bf16"}, kvCache={"dtype": "bf16"})
    manifest["spec"]["serving"]["replicas"] = 2
    # Without the router (on by default at 2 replicas): this is about the Service and the gates.
    manifest["spec"]["serving"]["router"] = {"enabled": False}
    apply(cluster, namespace, manifest)
    wait_ready(cluster, namespace, "door")
    replicas = wait_for(
        lambda: found if len(found := serving_pods(cluster, namespace, "door")) == 2 else None,
        60,
        "two serving pods",
    )
    url = service_url(cluster, namespace, "door")

    # From the host: once kube-proxy has programmed the Service, every request is answered, and each
    # replica's gate admits some of them.
    wait_for(lambda: _answers(url), 30, "the Service's ClusterIP to answer")
    before = {p.metadata.name: _admitted(p) for p in replicas}

    def both_served() -> bool:
        assert all(_generate(url) == 200 for _ in range(10))
        return all(_admitted(p) > before[p.metadata.name] for p in replicas)

    wait_for(both_served, 60, "requests to the Service ClusterIP to reach both replicas' gates")

    # From another pod: the Service answers; each gate port is open, each engine port is not.
    env = [
        {"name": "REPLICA_IPS", "value": ",".join(p.status.pod_ip for p in replicas)},
        {"name": "GATE_PORT", "value": str(GATE_PORT)},
        {"name": "ENGINE_PORT", "value": str(ENGINE_PORT)},
    ]
    probe = pod("door-probe", python_container("probe", PROBE), restartPolicy="Never")
    probe["spec"]["containers"][0]["env"] += env
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(probe))
    core = client.CoreV1Api(cluster.api_client())

    def report() -> dict | None:
        phase = core.read_namespaced_pod("door-probe", namespace).status.phase
        if phase not in ("Succeeded", "Failed"):
            return None
        logs = cluster.kubectl("logs", "-n", namespace, "door-probe").stdout
        assert phase == "Succeeded", logs
        return dict(json.loads(logs.strip().splitlines()[-1]))

    seen = wait_for(report, 60, "the probe pod's report")
    assert seen["service"] == 200
    assert seen["gate"] == ["open", "open"]
    assert seen["engine"] == ["ConnectionRefusedError", "ConnectionRefusedError"]
