"""While calibration runs, and after it fails, the artifact has no manifest (consumers see it as
absent); a rerun publishes it with the same digest an uninterrupted run gives."""

from __future__ import annotations

import json
import shutil

import pytest

from kvant_contracts.artifact_manifest import MANIFEST_NAME, verify_artifact
from kvant_runtime.calibrate.calibrator import calibrate
from kvant_runtime.checkpoint import layer_reader as checkpoint_module
from kvant_runtime.checkpoint.errors import CheckpointError
from tests.unit.calibrate_harness import CALIBRATION, int4_artifact
from tests.unit.convert_harness import kvant


def test_failure_leaves_it_unpublished_and_a_rerun_publishes(tmp_path, monkeypatch):
    artifact = int4_artifact("llama", tmp_path / "int4")
    twin = shutil.copytree(artifact, tmp_path / "twin")
    original = checkpoint_module.Checkpoint.module_tensors
    seen: list[bool] = []

    def fail_in_layer_one(self, prefix, expected):
        if prefix == "model.layers.1":
            seen.append((artifact / MANIFEST_NAME).exists())
            raise CheckpointError("disk went away while reading model.layers.1")
        return original(self, prefix, expected)

    monkeypatch.setattr(checkpoint_module.Checkpoint, "module_tensors", fail_in_layer_one)
    with pytest.raises(CheckpointError, match="disk went away"):
        calibrate(artifact, CALIBRATION, lambda _: None)
    assert seen == [False], "unpublished while running"
    assert not (artifact / MANIFEST_NAME).exists(), "still unpublished after the failure"
    monkeypatch.undo()

    done = kvant(
        "calibrate",
        artifact,
        "--samples",
        str(CALIBRATION.samples),
        "--sequence-length",
        str(CALIBRATION.sequence_length),
    )
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout.splitlines()[-1])
    clean = calibrate(twin, CALIBRATION, lambda _: None)
    assert printed["digest"] == clean["digest"]
    assert verify_artifact(artifact, clean["digest"], content=True)


def test_cli_failure_names_the_problem_and_the_unpublished_state(tmp_path):
    artifact = int4_artifact("llama", tmp_path / "int4")
    (artifact / "kvant-manifest.json").rename(tmp_path / "moved.json")

    not_artifact = kvant("calibrate", artifact)
    assert not_artifact.returncode == 2
    assert "not a published Kvant artifact" in not_artifact.stderr
    assert "Traceback" not in not_artifact.stderr

    (tmp_path / "moved.json").rename(artifact / "kvant-manifest.json")
    bad_data = kvant("calibrate", artifact, "--data", tmp_path / "missing.txt")
    assert bad_data.returncode == 2
    assert "--data" in bad_data.stderr and "no such file" in bad_data.stderr
    assert (artifact / MANIFEST_NAME).exists(), "bad flags never unpublish the artifact"
