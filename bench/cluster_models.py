"""The QuantizedModel the cluster benches apply: the tiny checkpoint in bf16 (so no conversion Job)
served by the simulator on a simulated 2 GiB GPU, from a node path the operator's default file://
prefix allows. Each bench adds what it measures (replicas, limits, the router)."""

from __future__ import annotations

from typing import Any

NODE_CHECKPOINT = "/var/lib/kvant/models/tiny-llama"


def simulator_model(name: str, namespace: str, replicas: int, **spec: dict[str, Any]) -> dict[str, Any]:
    serving = {"engine": "simulator", "replicas": replicas, "gpu": {"memoryGiB": 2}, "memFractionStatic": 0.9}
    return {
        "apiVersion": "kvant.dev/v1alpha1",
        "kind": "QuantizedModel",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {"uri": f"file://{NODE_CHECKPOINT}"},
            "weights": {"format": "bf16"},
            "kvCache": {"dtype": "bf16"},
            **spec,
            "serving": {**serving, **spec.get("serving", {})},
        },
    }
