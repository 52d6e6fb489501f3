"""The apiserver fixture is a real kube-apiserver: CRDs install, objects round-trip, schemas reject."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

pytestmark = pytest.mark.cluster

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.foundation.kvant.dev"},
    "spec": {
        "group": "foundation.kvant.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {"size": {"type": "integer", "minimum": 1, "maximum": 8}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


def _widget(name: str, size: object) -> dict[str, object]:
    return {
        "apiVersion": "foundation.kvant.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size},
    }


def test_crd_object_round_trips_and_invalid_object_is_rejected(apiserver):
    apiserver.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(CRD))
    apiserver.wait_established("widgets.foundation.kvant.dev")
    custom = client.CustomObjectsApi(apiserver.api_client())

    custom.create_namespaced_custom_object(
        "foundation.kvant.dev", "v1", "default", "widgets", _widget("ok", 4)
    )
    stored = custom.get_namespaced_custom_object("foundation.kvant.dev", "v1", "default", "widgets", "ok")
    assert stored["spec"] == {"size": 4}

    with pytest.raises(ApiException) as rejected:
        custom.create_namespaced_custom_object(
            "foundation.kvant.dev", "v1", "default", "widgets", _widget("bad", 99)
        )
    assert rejected.value.status == 422
    assert "spec.size" in rejected.value.body
