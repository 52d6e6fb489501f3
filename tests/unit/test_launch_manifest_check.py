"""`kvant launch` checks the artifact against its manifest and digest before SGLang starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvant_cli.main import main
from kvant_contracts.artifact_manifest import (
    MANIFEST_NAME,
    ManifestError,
    artifact_digest,
    file_sha256,
    verify_artifact,
)
from tests.unit.launch_fixtures import checkpoint


def converted_artifact(tmp_path: Path) -> tuple[Path, str]:
    """An INT4 artifact folder with two weight files and a manifest over them."""
    folder = checkpoint(tmp_path, "mla", "int4")
    (folder / "model-00001.safetensors").write_bytes(b"a" * 100)
    (folder / "model-00002.safetensors").write_bytes(b"b" * 50)
    names = ["config.json", "model-00001.safetensors", "model-00002.safetensors"]
    hashes = {n: file_sha256(folder / n) for n in names}
    files = {n: {"sha256": hashes[n], "bytes": (folder / n).stat().st_size} for n in names}
    digest = artifact_digest(hashes)
    manifest = {"kvantManifestVersion": 1, "files": files, "digest": digest}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    return folder, digest


def write_spec(tmp_path: Path, **fields: object) -> Path:
    path = tmp_path / "launch.yaml"
    path.write_text(yaml.safe_dump({"servedModelName": "m", "weightsFormat": "int4", **fields}))
    return path


def test_intact_artifact_launches_with_the_validated_command(tmp_path, capsys):
    folder, digest = converted_artifact(tmp_path)
    spec = write_spec(tmp_path, modelPath=str(folder), artifactDigest=digest, kvCacheDtype="fp8_e4m3")
    assert main(["launch", "--spec", str(spec), "--dry-run", "--verify-content"]) == 0
    command = capsys.readouterr().out.split()
    assert command[1:3] == ["-m", "sglang.launch_server"]
    assert command[command.index("--kv-cache-dtype") + 1] == "fp8_e4m3"


def test_digest_other_than_the_plans_is_refused(tmp_path, capsys):
    folder, _ = converted_artifact(tmp_path)
    spec = write_spec(tmp_path, modelPath=str(folder), artifactDigest="sha256:" + "0" * 64)
    assert main(["launch", "--spec", str(spec), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "but the plan expects sha256:000" in err
    assert "Traceback" not in err


def test_truncated_file_is_named(tmp_path):
    folder, digest = converted_artifact(tmp_path)
    (folder / "model-00002.safetensors").write_bytes(b"b" * 10)
    with pytest.raises(ManifestError, match=r"model-00002.safetensors has 10 bytes, the manifest says 50"):
        verify_artifact(folder, digest)


def test_same_size_corruption_is_found_only_by_the_content_check(tmp_path):
    folder, digest = converted_artifact(tmp_path)
    (folder / "model-00001.safetensors").write_bytes(b"c" * 100)
    verify_artifact(folder, digest)  # sizes match: the cheap check passes
    with pytest.raises(ManifestError, match=r"model-00001.safetensors has sha256"):
        verify_artifact(folder, digest, content=True)


def test_edited_manifest_no_longer_matches_its_digest(tmp_path):
    folder, _ = converted_artifact(tmp_path)
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    manifest["files"]["model-00001.safetensors"]["sha256"] = "f" * 64
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="does not match its file list"):
        verify_artifact(folder, None)


def test_missing_manifest_is_refused_when_the_plan_names_a_digest(tmp_path, capsys):
    folder = checkpoint(tmp_path, "gqa", "bf16")
    spec = write_spec(
        tmp_path, modelPath=str(folder), weightsFormat="bf16", artifactDigest="sha256:" + "1" * 64
    )
    assert main(["launch", "--spec", str(spec), "--dry-run"]) == 2
    assert f"{MANIFEST_NAME} does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kvCacheDtype": "fp9"}, "kvCacheDtype must be one of auto, bf16, fp8_e4m3, fp8_e5m2, got 'fp9'"),
        ({"memFractionStatic": 1.5}, "memFractionStatic must be a number between 0 and 1"),
        ({"tensorParalel": 8}, "unknown field(s) tensorParalel"),
        ({"engineArgs": "--foo"}, "engineArgs must be a list of strings"),
    ],
)
def test_invalid_spec_fields_are_named(tmp_path, capsys, fields, message):
    folder = checkpoint(tmp_path, "gqa", "bf16")
    spec = write_spec(tmp_path, modelPath=str(folder), weightsFormat="bf16", **fields)
    assert main(["launch", "--spec", str(spec), "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_the_admin_token_reaches_sglang_and_never_the_log(tmp_path, capsys, monkeypatch):
    folder, digest = converted_artifact(tmp_path)
    spec = write_spec(tmp_path, modelPath=str(folder), artifactDigest=digest)
    monkeypatch.setenv("KVANT_ADMIN_API_KEY", "s3cret-admin")
    assert main(["launch", "--spec", str(spec), "--dry-run"]) == 0  # SGLang's parser accepted it
    out = capsys.readouterr().out
    command = out.split()
    assert command[command.index("--admin-api-key") + 1] == "REDACTED"
    assert "s3cret-admin" not in out
