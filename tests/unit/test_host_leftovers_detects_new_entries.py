"""The clean-host check sees what a dirty run leaves in the watched folders, and nothing else."""

from __future__ import annotations

from pathlib import Path

from tests.host_leftovers import new_since, snapshot


def test_new_entries_in_watched_folders_are_named(tmp_path: Path) -> None:
    for folder in ("etc", "var/lib", "tmp"):
        (tmp_path / folder).mkdir(parents=True)
    before = snapshot(tmp_path)
    (tmp_path / "source").touch()  # what the old node agent left: a mountpoint on the host's /
    (tmp_path / "etc" / "kvant").mkdir()
    (tmp_path / "var" / "lib" / "kvant").mkdir()
    (tmp_path / "tmp" / "scratch").mkdir()  # temporary folders are not watched
    assert new_since(before, snapshot(tmp_path)) == ["/etc/kvant", "/source", "/var/lib/kvant"]


def test_an_untouched_tree_has_no_leftovers(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    assert new_since(snapshot(tmp_path), snapshot(tmp_path)) == []
