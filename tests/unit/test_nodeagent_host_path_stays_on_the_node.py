"""hostPath volumes resolve below the node's own root, and a symlink there cannot lead one out:
the refusal comes before anything is created."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvant_dev.nodeagent.volumes import PodVolumes, VolumeNotReadyError


def _volumes(tmp_path: Path, path: str, kind: str) -> PodVolumes:
    pod = {
        "metadata": {"namespace": "default", "name": "p", "uid": "u"},
        "spec": {"volumes": [{"name": "data", "hostPath": {"path": path, "type": kind}}]},
    }
    return PodVolumes(pod, tmp_path / "pod", tmp_path / "node", lambda *_: None, lambda *_: ("", 0.0), 0.0)


def test_directory_or_create_is_made_inside_the_node_root(tmp_path: Path) -> None:
    volumes = _volumes(tmp_path, "/var/lib/kvant/models", "DirectoryOrCreate")
    volumes.setup()
    assert volumes.host_paths["data"] == tmp_path / "node" / "var" / "lib" / "kvant" / "models"
    assert volumes.host_paths["data"].is_dir()


def test_a_symlink_out_of_the_node_root_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "node").mkdir()
    os.symlink(outside, tmp_path / "node" / "escape")
    volumes = _volumes(tmp_path, "/escape/new/folder", "DirectoryOrCreate")
    with pytest.raises(VolumeNotReadyError, match="leads outside the node's filesystem"):
        volumes.setup()
    assert list(outside.iterdir()) == []


def test_a_missing_directory_is_the_kubelets_error(tmp_path: Path) -> None:
    with pytest.raises(VolumeNotReadyError, match="hostPath type check failed"):
        _volumes(tmp_path, "/models/absent", "Directory").setup()
    assert not (tmp_path / "node" / "models").exists()
