"""Two replicas behind the router: smg (the real one, from the runtime image) discovers both engine
pods through the API with its pod-reading Role, the model's Service reaches it, and every request
lands on a gate. smg's retry of a gate's 429 on another replica is not shown here: bursts on two
one-at-a-time gates produced no refusal to retry (see the README's router section)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from tests.kube_wait import wait_for

from e2e.qm import apply, metric_value, metrics_url, service_url, serving_pods, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]
MODEL = "routed"


def ask(url: str, new_tokens: int) -> int:
    # smg routes several models (IGW mode, which its service discovery uses), so /generate names one.
    body = json.dumps(
        {"model": MODEL, "text": "hello", "sampling_params": {"max_new_tokens": new_tokens}}
    ).encode()
    request = urllib.request.Request(
        f"{url}/generate", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def at_once(url: str, count: int, new_tokens: int) -> list[int]:
    codes: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        code = ask(url, new_tokens)
        with lock:
            codes.append(code)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    return sorted(codes)


def admitted(cluster, namespace: str, name: str) -> float:
    """Requests the model's gates admitted, over all its engine pods."""
    total = 0.0
    for pod in serving_pods(cluster, namespace, name):
        with urllib.request.urlopen(f"{metrics_url(pod)}/metrics", timeout=5) as response:
            total += metric_value(response.read().decode(), "kvant_gate_admitted_total") or 0.0
    return total


def test_the_router_discovers_the_engine_pods_and_serves_the_models_service(
    cluster, operator, namespace, tiny_model
):
    model = tiny_model(
        MODEL,
        kvCache={"dtype": "bf16"},
        serving={"engine": "simulator", "replicas": 2, "gpu": {"memoryGiB": 2}, "memFractionStatic": 0.9},
        protection={"mode": "off"},
    )
    apply(cluster, namespace, model)
    wait_ready(cluster, namespace, MODEL, timeout=240)  # Ready includes the router's rollout
    url = service_url(cluster, namespace, MODEL)
    # smg registers the engine pods as its discovery finds them (it reads pods with the router's Role).
    wait_for(lambda: workers(url) == 2 or None, 90, "smg to register both engine pods")
    before = admitted(cluster, namespace, MODEL)
    assert at_once(url, 4, 50) == [200] * 4
    after = admitted(cluster, namespace, MODEL)
    assert after - before == 4, "every request through the model's Service reached a gate through smg"


def workers(url: str) -> int:
    """How many engine pods smg has registered (its /workers listing)."""
    with urllib.request.urlopen(f"{url}/workers", timeout=5) as response:
        return len(json.load(response).get("workers", []))
