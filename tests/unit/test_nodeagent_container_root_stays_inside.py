"""A container's mounts resolve inside its own root: symlinks of the image cannot lead a mountpoint
onto the host, `..` cannot leave a volume, and every host mount is carried into the root once."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from kvant_dev.nodeagent.rootfs import MountError, host_submounts, resolve_mount_path, sub_path

MOUNTINFO = """\
22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
23 22 0:5 / /dev rw - devtmpfs devtmpfs rw
24 23 0:21 / /dev/shm rw - tmpfs tmpfs rw
25 23 0:22 / /dev/pts rw - devpts devpts rw
26 22 0:23 / /proc rw - proc proc rw
27 22 0:24 / /sys rw - sysfs sysfs rw
28 27 0:25 / /sys/fs/cgroup rw - tmpfs tmpfs rw
29 22 0:26 / /mnt/with\\040space rw - tmpfs tmpfs rw
"""


def test_each_outermost_host_mount_is_carried_once() -> None:
    assert host_submounts(MOUNTINFO) == ["/dev", "/mnt/with space", "/proc", "/sys"]


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """A tiny image tree with the links a Debian root has, and one that points out of it."""
    (tmp_path / "run").mkdir()
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    (tmp_path / "var").mkdir()
    os.symlink("/run", tmp_path / "var" / "run")  # absolute, as on the host
    os.symlink("usr/lib", tmp_path / "lib")  # relative
    os.symlink("../../../../..", tmp_path / "usr" / "escape")  # climbs past the root
    os.symlink("loop", tmp_path / "loop")
    return tmp_path


def test_symlinks_resolve_inside_the_image(image: Path) -> None:
    assert resolve_mount_path("/var/run/secrets/token", image) == "/run/secrets/token"
    assert resolve_mount_path("/lib/x", image) == "/usr/lib/x"
    assert resolve_mount_path("/usr/escape/etc/kvant", image) == "/etc/kvant"  # clamped at the root
    assert resolve_mount_path("/source", image) == "/source"


@pytest.mark.parametrize("bad", ["relative/path", "/a/../../etc"])
def test_mount_paths_must_be_absolute_without_dotdot(image: Path, bad: str) -> None:
    with pytest.raises(MountError, match="absolute path without"):
        resolve_mount_path(bad, image)


def test_a_symlink_loop_is_refused(image: Path) -> None:
    with pytest.raises(MountError, match="more than 40 symlinks"):
        resolve_mount_path("/loop/x", image)


def test_sub_path_stays_inside_its_volume(tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    os.symlink(str(tmp_path), volume / "out")
    assert sub_path(volume, "models/a") == volume / "models" / "a"
    assert (volume / "models" / "a").is_dir()
    with pytest.raises(MountError, match=re.escape("without '..'")):
        sub_path(volume, "../elsewhere")
    with pytest.raises(MountError, match="resolves outside its volume"):
        sub_path(volume, "out")
