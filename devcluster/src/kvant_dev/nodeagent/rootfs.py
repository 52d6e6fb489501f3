"""A container's own root: the host's tree as a read-only base, its writes and mountpoints private.

There is no image runtime here, so the "image" is this machine's own tree (the project virtualenv
included). Each container starts in a private mount namespace:

1. a tmpfs at `<pod dir>/roots/<container>` holds an overlay's upper layer, so every write outside
   a volume (mountpoints such as `/source` or `/etc/kvant/limits` too) stays in that tmpfs;
2. an overlay of `/` over it becomes the new root; the host's other mounts (/proc, /dev, /sys...)
   are bound beneath it recursively, since an overlay shows one filesystem only;
3. the pod's volumes are bound at their mountPath inside it (read-only where asked);
4. the command runs chrooted there (`unshare --root`), in its workingDir.

All of it lives and dies with the mount namespace: nothing of a pod ever appears on the host.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

_MAX_LINKS = 40  # as the kernel allows when it follows links itself


class MountError(ValueError):
    """A volume mount that cannot be set up safely; the message names the mount and why."""


@dataclass(frozen=True)
class Mount:
    host_path: Path
    mount_path: str
    read_only: bool


def host_submounts(mountinfo: str) -> list[str]:
    """The outermost mount points below `/` (a recursive bind of each carries those nested in it)."""
    points = sorted({_unescape(line.split()[4]) for line in mountinfo.splitlines() if line.strip()} - {"/"})
    outermost: list[str] = []
    for point in points:
        if not any(point.startswith(top.rstrip("/") + "/") for top in outermost):
            outermost.append(point)
    return outermost


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def resolve_mount_path(mount_path: str, image_root: Path = Path("/")) -> str:
    """The mountPath with every symlink of the image resolved inside the image, as runc does.

    Mountpoints are made before the chroot, where an absolute symlink (`/var/run` -> `/run`) would
    otherwise lead onto the host; resolving each link against the image's root and clamping `..` at
    it yields a path that stays inside, whatever the links say.
    """
    path = PurePosixPath(mount_path)
    if not path.is_absolute() or ".." in path.parts:
        raise MountError(f"mountPath {mount_path!r} must be an absolute path without '..'")
    pending, resolved, links = list(path.parts[1:]), list[str](), 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            resolved = resolved[:-1]
            continue
        candidate = image_root.joinpath(*resolved, part)
        if not candidate.is_symlink():
            resolved.append(part)
            continue
        links += 1
        if links > _MAX_LINKS:
            raise MountError(f"mountPath {mount_path!r} passes through more than {_MAX_LINKS} symlinks")
        target = PurePosixPath(os.readlink(candidate))
        if target.is_absolute():
            resolved = []
        pending = [p for p in target.parts if p not in ("/", ".")] + pending
    return "/" + "/".join(resolved)


def sub_path(volume_path: Path, sub: str) -> Path:
    """`volume/subPath`, refused when it would leave the volume (`..` or a symlink pointing out)."""
    if PurePosixPath(sub).is_absolute() or ".." in PurePosixPath(sub).parts:
        raise MountError(f"subPath {sub!r} must be a relative path without '..'")
    target = volume_path / sub
    if not target.exists():
        target.mkdir(parents=True)  # inside the volume, as the kubelet creates a missing subPath
    if not target.resolve().is_relative_to(volume_path.resolve()):
        raise MountError(f"subPath {sub!r} resolves outside its volume")
    return target


def root_view_argv(root: Path, mounts: list[Mount], workdir: str, submounts: list[str]) -> list[str]:
    """argv prefix that runs a command in a private mount namespace, chrooted into its own root."""
    if any(c in str(root) for c in ",:\n"):
        raise MountError(f"the container root {root} holds a character overlayfs options cannot carry")
    r = shlex.quote(str(root))
    merged = f"{r}/merged"
    steps = [
        "set -e",
        f"mount -t tmpfs -o mode=0755 kvant-root {r}",
        f"mkdir {r}/upper {r}/work {r}/merged",
        f"mount -t overlay overlay -o lowerdir=/,upperdir={r}/upper,workdir={r}/work {merged}",
    ]
    steps += [f"mount --rbind {shlex.quote(m)} {merged}{shlex.quote(m)}" for m in submounts]
    for mount in sorted(mounts, key=lambda m: len(m.mount_path)):
        src, dst = shlex.quote(str(mount.host_path)), merged + shlex.quote(mount.mount_path)
        if mount.host_path.is_dir():
            steps.append(f"mkdir -p {dst}")
        else:
            steps.append(f"mkdir -p $(dirname {dst}) && touch {dst}")
        steps.append(f"mount --bind {src} {dst}")
        if mount.read_only:
            steps.append(f"mount -o remount,bind,ro {dst}")
    steps.append(f'exec unshare --root={merged} --wd={shlex.quote(workdir)} -- "$@"')
    script = "\n".join(steps)
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh"]


def read_host_submounts() -> list[str]:
    with open(f"/proc/{os.getpid()}/mountinfo") as handle:
        return host_submounts(handle.read())
