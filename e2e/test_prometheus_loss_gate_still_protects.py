"""Protection reads a real Prometheus; when Prometheus goes away the operator says so in
CacheProtected, and each pod's gate keeps the cache safe on its own."""

from __future__ import annotations

import pytest
from tests.kube_wait import wait_for

from e2e.capacity import MEM_FRACTION, TINY_BYTES_PER_TOKEN, gpu_memory_for_tokens
from e2e.qm import apply, condition, get_qm, metrics_url, service_url, serving_pods, wait_ready
from kvant_dev.loadgen import LoadShape, engine_retractions, generate_load
from kvant_dev.prometheus import Prometheus, pod_discovery_job

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]

LOAD = LoadShape(
    clients=40,
    seconds=10,
    prompt_tokens=400,
    new_tokens=200,
    slo_seconds=8,
    bytes_per_token=TINY_BYTES_PER_TOKEN,
)


def _cache_protected(cluster, namespace: str, status: str) -> dict[str, str] | None:
    found = condition(get_qm(cluster, namespace, "watched"), "CacheProtected")
    return found if found and found["status"] == status else None


def test_prometheus_loss_is_reported_and_gate_keeps_protecting(
    cluster, operator, namespace, tiny_model, tiny_checkpoint, tmp_path
):
    prometheus = Prometheus(
        cluster.toolchain.prometheus, tmp_path / "prometheus", [pod_discovery_job(cluster.prometheus_targets)]
    )
    prometheus.start()
    try:
        apply(
            cluster,
            namespace,
            tiny_model(
                "watched",
                kvCache={"dtype": "bf16"},
                serving={
                    "engine": "simulator",
                    "memFractionStatic": MEM_FRACTION,
                    "gpu": {"memoryGiB": gpu_memory_for_tokens(tiny_checkpoint, 4096)},
                },
                limits={"maxConcurrency": 32, "maxQueued": 8, "queueTimeoutSeconds": 2},
                protection={
                    "mode": "enforce",
                    "targetTokenUsage": 0.8,
                    "concurrency": {"min": 1},
                    "metrics": {"intervalSeconds": 2, "prometheusURL": prometheus.url},
                },
            ),
        )
        wait_ready(cluster, namespace, "watched")
        healthy = wait_for(
            lambda: _cache_protected(cluster, namespace, "True"),
            90,
            "CacheProtected=True from Prometheus samples",
        )
        assert healthy["reason"] == "WithinTarget"
    finally:
        prometheus.stop()

    lost = wait_for(lambda: _cache_protected(cluster, namespace, "Unknown"), 60, "the loss to be reported")
    assert lost["reason"] == "MetricsUnavailable" and prometheus.url in lost["message"]

    pod_metrics = metrics_url(serving_pods(cluster, namespace, "watched")[0])
    before = engine_retractions(pod_metrics)
    load = generate_load(service_url(cluster, namespace, "watched"), LOAD)
    assert load.statuses[429] > 0 and load.completed > 0
    assert engine_retractions(pod_metrics) - before <= 2, dict(load.statuses)
