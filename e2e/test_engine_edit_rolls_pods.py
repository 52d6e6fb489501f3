"""Engine-affecting edits roll the pods: a KV dtype change re-plans capacity and replaces every pod."""

from __future__ import annotations

import pytest
from tests.kube_wait import wait_for

from e2e.qm import apply, get_qm, patch_spec, serving_pods, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def _flag(pod, flag: str) -> str:
    args = next(c for c in pod.spec.containers if c.name == "engine").args
    return str(args[args.index(flag) + 1])


def _kv_tokens(pod) -> int:
    return int(_flag(pod, "--kv-tokens"))


def test_kv_dtype_edit_rolls_pods_with_doubled_capacity(cluster, operator, namespace, tiny_model):
    apply(cluster, namespace, tiny_model(kvCache={"dtype": "bf16"}))
    wait_ready(cluster, namespace, "tiny")
    old = serving_pods(cluster, namespace, "tiny")
    bf16_tokens = _kv_tokens(old[0])
    assert _flag(old[0], "--kv-cache-dtype") == "bf16"

    patch_spec(cluster, namespace, "tiny", {"kvCache": {"dtype": "fp8_e4m3", "scales": "unit"}})
    qm = wait_ready(cluster, namespace, "tiny")

    def rolled() -> list | None:
        pods = serving_pods(cluster, namespace, "tiny")
        fresh = [p for p in pods if p.metadata.uid not in {o.metadata.uid for o in old}]
        return fresh if fresh and len(pods) == len(fresh) else None

    new = wait_for(rolled, 90, "every serving pod to be replaced")
    assert qm["status"]["plan"]["kvCacheDtype"] == "fp8_e4m3"
    assert _flag(new[0], "--kv-cache-dtype") == "fp8_e4m3"
    fp8_tokens = _kv_tokens(new[0])
    assert fp8_tokens == qm["status"]["plan"]["kvTokensPerReplica"]
    assert abs(fp8_tokens - 2 * bf16_tokens) <= 1, "FP8 KV halves bytes/token, so capacity doubles"
    assert get_qm(cluster, namespace, "tiny")["status"]["artifact"]["digest"]
