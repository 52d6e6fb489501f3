"""The model's HorizontalPodAutoscaler: the cluster's own autoscaler, not a loop of ours, moves
`spec.serving.replicas` through the QuantizedModel's scale subresource on the gates' demand.

Why the HPA with prometheus-adapter rather than KEDA (docs/concepts/autoscaling.md has the long form): the HPA
controller ships in every cluster's kube-controller-manager, and KEDA too ends in an HPA (it serves
its own external metrics API to one); the only extra part is a metrics adapter, which a cluster
running Prometheus often has already, where KEDA is an operator, a metrics server and webhooks.
"""

from __future__ import annotations

from kvant_contracts.autoscaling import DEMAND_METRIC
from kvant_contracts.kube_object import Obj
from kvant_operator.api.resource import API_VERSION
from kvant_operator.api.spec import AutoscalingSpec
from kvant_operator.object_keys import SERVING_COMPONENT
from kvant_operator.render.meta import object_meta

HPA = ("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers")


def autoscaler(body: Obj, scaling: AutoscalingSpec) -> Obj:
    """The HPA, named after the model and owned by it."""
    model = body["metadata"]["name"]
    return {
        "apiVersion": HPA[0],
        "kind": HPA[1],
        "metadata": object_meta(body, model, SERVING_COMPONENT),
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": "QuantizedModel", "name": model},
            "minReplicas": scaling.min_replicas,
            "maxReplicas": scaling.max_replicas,
            # Averaged over the engine pods the scale subresource's selector (status.selector) picks.
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": DEMAND_METRIC},
                        "target": {"type": "AverageValue", "averageValue": quantity(scaling.target_demand)},
                    },
                }
            ],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": scaling.scale_up_stabilization_seconds},
                "scaleDown": {"stabilizationWindowSeconds": scaling.scale_down_stabilization_seconds},
            },
        },
    }


def quantity(value: float) -> str:
    """A Kubernetes quantity in thousandths (0.8 → "800m"), the form the API server stores."""
    return f"{round(value * 1000)}m"
