"""ConfigMap and Secret edits reach a running pod's volumes as late as on a kubelet: on the pod's sync
once the delay has passed, never at once. A pod that starts gets the current content; tokens and
downward-API files are refreshed on every sync, as before."""

from __future__ import annotations

import base64
import itertools
from pathlib import Path

from kvant_contracts.kube_object import Obj
from kvant_dev.nodeagent.volumes import PodVolumes

DELAY = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pod() -> Obj:
    token = {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
    limits = {"configMap": {"name": "limits"}}
    namespace = {
        "downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}
    }
    return {
        "metadata": {"namespace": "serving", "name": "p", "uid": "u"},
        "spec": {
            "volumes": [
                {"name": "limits", "configMap": {"name": "limits"}},
                {"name": "keys", "secret": {"secretName": "keys"}},
                {"name": "api", "projected": {"sources": [token, limits, namespace]}},
            ]
        },
    }


def _configmap(value: str) -> Obj:
    return {"kind": "ConfigMap", "data": {"limits.yaml": value}}


def _secret(value: str) -> Obj:
    return {"kind": "Secret", "type": "Opaque", "data": {"keys": base64.b64encode(value.encode()).decode()}}


class Node:
    """One pod's volumes over an object store the test edits, with a clock it moves."""

    def __init__(self, root: Path, limits: str = "v1") -> None:
        self.objects: dict[tuple[str, str], Obj] = {
            ("ConfigMap", "limits"): _configmap(limits),
            ("Secret", "keys"): _secret("k1"),
        }
        self.clock = Clock()
        tokens = itertools.count(1)
        # Tokens that are always due for renewal: the token file changes on every sync.
        self.volumes = PodVolumes(
            _pod(),
            root / "pod",
            root / "node",
            lambda kind, _ns, name: self.objects.get((kind, name)),
            lambda _pod, _projection: (f"token-{next(tokens)}", 0.0),
            DELAY,
            self.clock,
        )
        self.volumes.setup()

    def file(self, volume: str, name: str) -> str:
        return (self.volumes.host_paths[volume] / name).read_text()

    def sync_at(self, seconds: float) -> None:
        self.clock.now = 1000.0 + seconds
        self.volumes.refresh()


def test_an_edit_arrives_only_after_the_delay_in_every_volume_that_shows_it(tmp_path: Path) -> None:
    node = Node(tmp_path)
    assert node.file("limits", "limits.yaml") == node.file("api", "limits.yaml") == "v1"
    node.objects[("ConfigMap", "limits")] = _configmap("v2")
    node.objects[("Secret", "keys")] = _secret("k2")
    node.sync_at(0)
    node.sync_at(DELAY - 1)
    assert node.file("limits", "limits.yaml") == node.file("api", "limits.yaml") == "v1"
    assert node.file("keys", "keys") == "k1"
    node.sync_at(DELAY)
    assert node.file("limits", "limits.yaml") == node.file("api", "limits.yaml") == "v2"
    assert node.file("keys", "keys") == "k2"


def test_edits_during_the_delay_join_the_first_and_a_revert_cancels_it(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.objects[("ConfigMap", "limits")] = _configmap("v2")
    node.sync_at(0)
    node.objects[("ConfigMap", "limits")] = _configmap("v3")
    node.sync_at(DELAY / 2)
    node.sync_at(DELAY)
    assert node.file("limits", "limits.yaml") == "v3"  # a stream of edits cannot hold one back

    node.objects[("ConfigMap", "limits")] = _configmap("v4")
    node.sync_at(DELAY + 1)
    node.objects[("ConfigMap", "limits")] = _configmap("v3")
    node.sync_at(DELAY + 2)
    node.objects[("ConfigMap", "limits")] = _configmap("v5")
    node.sync_at(2 * DELAY + 1)
    assert node.file("limits", "limits.yaml") == "v3"  # v5's wait began at its own sync, not v4's


def test_tokens_and_downward_api_files_are_refreshed_on_every_sync(tmp_path: Path) -> None:
    node = Node(tmp_path)
    first = node.file("api", "token")
    node.sync_at(0)
    assert node.file("api", "token") != first
    assert node.file("api", "namespace") == "serving"


def test_a_deleted_object_leaves_the_last_content_and_a_new_pod_sees_the_current_one(tmp_path: Path) -> None:
    node = Node(tmp_path / "old")
    del node.objects[("ConfigMap", "limits")]
    node.sync_at(2 * DELAY)
    assert node.file("limits", "limits.yaml") == "v1"  # as a kubelet keeps it
    assert Node(tmp_path / "new", limits="v9").file("limits", "limits.yaml") == "v9"  # mounted at start
