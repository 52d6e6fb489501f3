"""A conversion split across an Indexed Job, then finalized, gives the artifact one worker gives."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kubernetes import client

from e2e.qm import apply, wait_ready

pytestmark = [pytest.mark.cluster, pytest.mark.e2e]


def test_two_worker_conversion_matches_a_local_single_worker_run(
    cluster, operator, namespace, tiny_model, tiny_checkpoint, tmp_path
):
    manifest = tiny_model(kvCache={"dtype": "bf16"})
    manifest["metadata"]["annotations"] = {"kvant.dev/conversion-workers": "2"}
    apply(cluster, namespace, manifest)
    status = wait_ready(cluster, namespace, "tiny", timeout=240)["status"]

    jobs = (
        client.BatchV1Api(cluster.api_client())
        .list_namespaced_job(namespace, label_selector="kvant.dev/artifact")
        .items
    )
    shards = next(j for j in jobs if j.metadata.name.endswith("-shards"))
    assert shards.spec.completion_mode == "Indexed" and shards.spec.completions == 2
    assert shards.status.succeeded == 2

    local = tmp_path / "local-int4"
    weights = manifest["spec"]["weights"]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "kvant_cli.main",
            "convert",
            str(tiny_checkpoint),
            str(local),
            "--format",
            "int4",
            "--group-size",
            str(weights["groupSize"]),
            "--targets",
            "all-linear",
        ],
        check=True,
        capture_output=True,
    )
    expected = json.loads((local / "kvant-manifest.json").read_text())["digest"]
    assert status["artifact"]["digest"] == expected
