"""An informer whose apiserver goes away mid-request (urllib3's errors, neither ApiException nor
OSError) relists and syncs again instead of its thread dying: the node agent must outlive an
apiserver restart, as a kubelet does (e2e/test_faults_under_load.py restarts one under load)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import urllib3

from kvant_dev.nodeagent.informer import Informer

POD = {"metadata": {"namespace": "ns", "name": "p"}}


def test_an_informer_relists_after_the_apiserver_drops_it() -> None:
    calls = {"list": 0}

    def list_pods(**kwargs: Any) -> SimpleNamespace:
        if kwargs.get("watch"):
            raise urllib3.exceptions.ProtocolError("Response ended prematurely")
        calls["list"] += 1
        if calls["list"] == 1:
            raise urllib3.exceptions.ProtocolError("Connection aborted.")
        return SimpleNamespace(data=json.dumps({"items": [POD], "metadata": {"resourceVersion": "7"}}))

    informer = Informer("pods", list_pods)
    informer.start()
    try:
        assert informer.wait_synced(timeout=10), "the informer never listed again after the first error"
        assert informer.get("ns", "p") == POD
    finally:
        informer.stop()
