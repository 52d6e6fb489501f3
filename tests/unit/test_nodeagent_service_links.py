"""The Service variables the node agent gives containers are the kubelet's (enableServiceLinks)."""

from __future__ import annotations

from kvant_dev.nodeagent.fieldrefs import service_links


def _service(name: str, ip: str, *ports: tuple[str, int]) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {"clusterIP": ip, "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports]},
    }


def test_named_ports_and_docker_link_variables() -> None:
    env = service_links([_service("tiny-model", "198.19.1.20", ("http", 80), ("metrics", 9090))])
    assert env["TINY_MODEL_SERVICE_HOST"] == "198.19.1.20"
    assert env["TINY_MODEL_SERVICE_PORT"] == "80"
    assert env["TINY_MODEL_SERVICE_PORT_METRICS"] == "9090"
    assert env["TINY_MODEL_PORT"] == "tcp://198.19.1.20:80"
    assert env["TINY_MODEL_PORT_9090_TCP_ADDR"] == "198.19.1.20"
    assert env["TINY_MODEL_PORT_9090_TCP_PORT"] == "9090"


def test_headless_services_get_no_variables() -> None:
    assert service_links([_service("headless", "None", ("http", 80))]) == {}
