"""A hostile checkpoint cannot make the converter read outside SRC or write outside OUT: absolute or
'..' shard names, links out of the checkpoint, and an OUT that overlaps SRC are refused with the file
named, nothing is published, and nothing outside OUT changes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from kvant_cli.main import main
from kvant_contracts.artifact_manifest import MANIFEST_NAME
from tests.tiny_checkpoints import copy_checkpoint, tiny_checkpoint

INDEX = "model.safetensors.index.json"


def _snapshot(root: Path) -> dict[str, str]:
    """Every file under `root` (links not followed) and a hash of its bytes."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _convert(capsys: pytest.CaptureFixture[str], source: Path, output: Path, *extra: str) -> tuple[int, str]:
    code = main(["convert", str(source), str(output), *extra])
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def _retarget_shard(source: Path, shard_name: str) -> None:
    index = json.loads((source / INDEX).read_text())
    first = sorted(set(index["weight_map"].values()))[0]
    index["weight_map"] = {k: (shard_name if v == first else v) for k, v in index["weight_map"].items()}
    (source / INDEX).write_text(json.dumps(index))


@pytest.mark.parametrize("kind", ["absolute", "dotdot"])
def test_a_shard_name_that_leaves_the_checkpoint_is_refused(tmp_path: Path, capsys, kind: str) -> None:
    source = copy_checkpoint(tiny_checkpoint("llama"), tmp_path / "src")
    victim = tmp_path / "victim.safetensors"
    victim.write_bytes(b"precious")
    _retarget_shard(source, str(victim) if kind == "absolute" else "../victim.safetensors")
    before = _snapshot(tmp_path)
    code, error = _convert(capsys, source, tmp_path / "out")
    assert code != 0 and "a checkpoint may only name paths inside" in error and "victim.safetensors" in error
    assert victim.read_bytes() == b"precious"
    assert {k: v for k, v in _snapshot(tmp_path).items() if not k.startswith("out/")} == before
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()


def test_a_file_linked_out_of_the_checkpoint_is_never_copied(tmp_path: Path, capsys) -> None:
    source = copy_checkpoint(tiny_checkpoint("llama"), tmp_path / "src")
    secret = tmp_path / "secret.txt"
    secret.write_text("AWS_SECRET_ACCESS_KEY=hunter2")
    (source / "tokenizer_config.json").unlink(missing_ok=True)
    (source / "tokenizer_config.json").symlink_to(secret)
    code, error = _convert(capsys, source, tmp_path / "out")
    assert code != 0 and "tokenizer_config.json" in error and "outside" in error
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()
    published = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert all("hunter2" not in p.read_text(errors="ignore") for p in published)


def test_links_into_an_allowed_root_are_followed(tmp_path: Path, capsys) -> None:
    """A Hugging Face cache: the snapshot folder links each file into the cache's blobs."""
    original = tiny_checkpoint("llama")
    blobs, snapshot = tmp_path / "hub" / "blobs", tmp_path / "hub" / "snapshots" / "abc"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for path in original.iterdir():
        (blobs / path.name).write_bytes(path.read_bytes())
        (snapshot / path.name).symlink_to(os.path.relpath(blobs / path.name, snapshot))
    code, error = _convert(capsys, snapshot, tmp_path / "refused")
    assert code != 0 and "--allow-symlinks-into" in error
    code, _ = _convert(capsys, snapshot, tmp_path / "out", "--allow-symlinks-into", str(blobs))
    assert code == 0 and (tmp_path / "out" / MANIFEST_NAME).is_file()
    assert not any(p.is_symlink() for p in (tmp_path / "out").iterdir())  # content copied, not links


@pytest.mark.parametrize("where", ["same", "inside", "around"])
def test_an_output_that_overlaps_the_source_is_refused(tmp_path: Path, capsys, where: str) -> None:
    source = copy_checkpoint(tiny_checkpoint("llama"), tmp_path / "models" / "src")
    output = {"same": source, "inside": source / "int4", "around": tmp_path / "models"}[where]
    before = _snapshot(tmp_path)
    code, error = _convert(capsys, source, output)
    assert code != 0 and "overlaps source" in error
    assert _snapshot(tmp_path) == before
