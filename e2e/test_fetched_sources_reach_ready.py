"""hf:// and s3:// sources on the local cluster: `kubectl apply` is the only step. The checkpoint is
fetched from the real SeaweedFS S3 server or the Hub stand-in, verified, pinned to its revision in
status, shared by models on the same source, and a missing object or a bad token is a clear Degraded."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.fault_proxy import FaultProxy
from tests.kube_wait import wait_for
from tests.model_stores import create_bucket, upload_folder

from e2e.conftest import HUB_TOKEN, SOURCE_CREDENTIALS
from e2e.qm import apply, condition, get_qm, wait_ready
from kvant_contracts.artifact_manifest import artifact_digest
from kvant_contracts.kube_object import Obj
from kvant_dev.cluster import LocalCluster
from kvant_dev.hub_standin import publish
from kvant_dev.model_stores import ModelStores

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def secret(namespace: str, name: str, data: dict[str, str]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": data,
    }


def apply_secret(cluster: LocalCluster, namespace: str, name: str, data: dict[str, str]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(secret(namespace, name, data)))


def s3_keys(stores: ModelStores) -> dict[str, str]:
    env = stores.s3.env()
    return {k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}


def fetched_model(tiny_model: Any, name: str, source: Obj) -> Obj:
    manifest: Obj = tiny_model(name)
    manifest["spec"]["source"] = source
    return manifest


def fetched(cluster: LocalCluster, namespace: str, name: str) -> Obj:
    qm = wait_ready(cluster, namespace, name, timeout=240)
    found = condition(qm, "Fetched")
    assert found is not None and found["status"] == "True", qm["status"]["conditions"]
    return qm


def test_s3_source_is_fetched_once_and_served(
    cluster: LocalCluster,
    operator: Any,
    namespace: str,
    tiny_model: Any,
    tiny_checkpoint: Path,
    model_stores: ModelStores,
    node_dir: Any,
) -> None:
    client = create_bucket(model_stores.s3, "models")
    upload_folder(client, tiny_checkpoint, "models", f"{namespace}/tiny")
    apply_secret(cluster, namespace, SOURCE_CREDENTIALS, s3_keys(model_stores))
    source = {"uri": f"s3://models/{namespace}/tiny"}  # no endpoint, no Secret: the operator's defaults
    apply(cluster, namespace, fetched_model(tiny_model, "from-s3", source))
    apply(cluster, namespace, fetched_model(tiny_model, "from-s3-too", source))
    first, second = fetched(cluster, namespace, "from-s3"), fetched(cluster, namespace, "from-s3-too")
    assert first["status"]["source"] == second["status"]["source"]
    pinned = first["status"]["source"]
    assert pinned["location"].startswith("pvc://kvant-artifacts/sources/s3/models/")
    assert pinned["files"] == len(list(tiny_checkpoint.iterdir())) and pinned["digest"].startswith("sha256:")
    jobs = cluster.kubectl(
        "get", "jobs", "-n", namespace, "-l", "app.kubernetes.io/component=fetch", "-o", "name"
    )
    assert len(jobs.stdout.split()) == 1, f"two models on one source fetched {jobs.stdout.split()}"
    # The bytes on the artifacts volume are the uploaded ones.
    folder = node_dir.host / "artifacts" / pinned["location"].removeprefix("pvc://kvant-artifacts/")
    for path in tiny_checkpoint.iterdir():
        assert (folder / path.name).read_bytes() == path.read_bytes(), path.name


def test_hf_source_is_pinned_to_the_commit_its_branch_named(
    cluster: LocalCluster,
    operator: Any,
    namespace: str,
    tiny_model: Any,
    tiny_checkpoint: Path,
    model_stores: ModelStores,
    tmp_path: Path,
) -> None:
    repo = f"kvant-e2e/{namespace}"
    commit = publish(model_stores.hub_root, repo, tiny_checkpoint, refs=("main",))
    apply_secret(cluster, namespace, "hub-token", {"HF_TOKEN": HUB_TOKEN})
    source = {"uri": f"hf://{repo}", "revision": "main", "credentialsSecret": "hub-token"}
    apply(cluster, namespace, fetched_model(tiny_model, "from-hub", source))
    pinned = fetched(cluster, namespace, "from-hub")["status"]["source"]
    assert pinned["revision"] == commit and pinned["location"].endswith(f"/sources/hf/{repo}/{commit}")
    # `main` moving on changes nothing already served: the model keeps its commit.
    moved = tmp_path / "moved"
    shutil.copytree(tiny_checkpoint, moved)
    (moved / "generation_config.json").write_text("{}")
    assert publish(model_stores.hub_root, repo, moved, refs=("main",)) != commit
    operator.stop()
    operator.start()
    assert wait_ready(cluster, namespace, "from-hub")["status"]["source"]["revision"] == commit


def test_missing_object_and_bad_token_are_degraded_with_the_cause(
    cluster: LocalCluster, operator: Any, namespace: str, tiny_model: Any, model_stores: ModelStores
) -> None:
    create_bucket(model_stores.s3, "models")
    apply_secret(cluster, namespace, SOURCE_CREDENTIALS, s3_keys(model_stores))
    apply_secret(cluster, namespace, "bad-token", {"HF_TOKEN": "hf_wrong"})
    apply(
        cluster, namespace, fetched_model(tiny_model, "missing", {"uri": f"s3://models/{namespace}/nothing"})
    )
    apply(
        cluster,
        namespace,
        fetched_model(
            tiny_model, "denied", {"uri": "hf://kvant-e2e/private", "credentialsSecret": "bad-token"}
        ),
    )

    def degraded(name: str) -> Obj | None:
        found = condition(get_qm(cluster, namespace, name), "Degraded")
        return found if found and found["status"] == "True" else None

    missing = wait_for(lambda: degraded("missing"), 180, "qm/missing to turn Degraded")
    assert missing["reason"] == "FetchFailed" and f"s3://models/{namespace}/nothing" in missing["message"]
    assert "no object under the prefix" in missing["message"]
    denied = wait_for(lambda: degraded("denied"), 180, "qm/denied to turn Degraded")
    assert denied["reason"] == "FetchFailed" and "hf://kvant-e2e/private" in denied["message"]
    assert "access denied (401)" in denied["message"] and "HF_TOKEN" in denied["message"]
    assert get_qm(cluster, namespace, "denied")["status"]["phase"] == "Fetching"


def test_a_fetch_pod_killed_mid_file_resumes_and_publishes_the_same_digest(
    cluster: LocalCluster,
    operator: Any,
    namespace: str,
    tiny_model: Any,
    tiny_checkpoint: Path,
    model_stores: ModelStores,
    node_dir: Any,
) -> None:
    client = create_bucket(model_stores.s3, "models")
    prefix = f"{namespace}/slow"
    upload_folder(client, tiny_checkpoint, "models", prefix)
    big = max(tiny_checkpoint.iterdir(), key=lambda p: p.stat().st_size)
    client.put_object(Bucket="models", Key=f"{prefix}/padding.safetensors", Body=b"\0" * (8 << 20))
    apply_secret(cluster, namespace, SOURCE_CREDENTIALS, s3_keys(model_stores))
    # The model reaches SeaweedFS through a throttling proxy on the host link, so the pod is caught mid-file.
    host = model_stores.s3.host
    with FaultProxy((host, model_stores.s3.port), host=host) as proxy:
        proxy.throttle(1 << 20)
        source = {"uri": f"s3://models/{prefix}", "s3": {"endpoint": proxy.url}}
        apply(cluster, namespace, fetched_model(tiny_model, "resumed", source))
        artifacts = node_dir.host / "artifacts" / "sources"

        def partial() -> Path | None:
            return (
                next((p for p in artifacts.rglob("*.part") if p.stat().st_size >= 1 << 20), None)
                if artifacts.exists()
                else None
            )

        part = wait_for(partial, 120, "the fetch pod to write a partial file")
        pods = cluster.kubectl(
            "get", "pods", "-n", namespace, "-l", "app.kubernetes.io/component=fetch", "-o", "name"
        ).stdout.split()
        assert len(pods) == 1
        cluster.kubectl("delete", "-n", namespace, pods[0], "--grace-period=0", "--force")
        assert part.exists(), "the partial file survives its pod"
        proxy.throttle(None)
        pinned = fetched(cluster, namespace, "resumed")["status"]["source"]
    # The replacement pod started from the bytes already on the volume (its first progress line)...
    logs = cluster.kubectl(
        "logs", "-n", namespace, "-l", "app.kubernetes.io/component=fetch", "--tail=-1"
    ).stdout
    start = json.loads(next(line for line in logs.splitlines() if '"event": "start"' in line))
    assert start["bytesDone"] >= 1 << 20, logs[:2000]
    # ...and published exactly the uploaded bytes.
    folder = node_dir.host / "artifacts" / pinned["location"].removeprefix("pvc://kvant-artifacts/")
    assert (folder / big.name).read_bytes() == big.read_bytes()
    assert (folder / "padding.safetensors").read_bytes() == b"\0" * (8 << 20)
    uploaded = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tiny_checkpoint.iterdir()}
    uploaded["padding.safetensors"] = hashlib.sha256(b"\0" * (8 << 20)).hexdigest()
    assert pinned["digest"] == artifact_digest(uploaded)
