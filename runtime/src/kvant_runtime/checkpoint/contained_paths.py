"""Paths a checkpoint names stay inside the checkpoint: no file outside SRC is read, none outside OUT
is written.

A checkpoint is input from whoever published it. Its index names shard files and its folder holds
files the converter copies into the artifact, so a hostile one could name `/etc/x` or `../x`, or link
`tokenizer_config.json` to `/proc/self/environ`. Every such path is checked after resolving symlinks.
Links may lead into the checkpoint itself, or into roots the caller allows explicitly (a Hugging Face
cache, whose snapshot folders link into its `blobs`): `--allow-symlinks-into DIR`.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from kvant_runtime.checkpoint.errors import CheckpointError


def contained(root: Path, name: str, what: str, allowed_roots: tuple[Path, ...] = ()) -> Path:
    """`root / name`, refused unless it is a relative path that stays inside `root` (or an allowed
    root) once symlinks are resolved. `what` names the field or file for the error message."""
    relative = PurePosixPath(name)
    if not relative.parts or relative.is_absolute() or ".." in relative.parts:
        raise CheckpointError(
            f"{what} {name!r}: a checkpoint may only name paths inside {root} (no absolute path, no '..')"
        )
    path = root / relative
    real = path.resolve()
    roots = [root.resolve(), *(r.resolve() for r in allowed_roots)]
    if not any(real == r or r in real.parents for r in roots):
        allowed = " or ".join(str(r) for r in roots)
        raise CheckpointError(
            f"{what} {name!r} leads to {real}, outside {allowed}; a link out of the checkpoint is allowed "
            "only into a folder given with --allow-symlinks-into"
        )
    return path


def check_disjoint(source: Path, output: Path) -> None:
    """OUT may not be SRC, nor lie inside it, nor contain it: converting must never touch the source."""
    src, out = source.resolve(), output.resolve()
    if src == out or src in out.parents or out in src.parents:
        raise CheckpointError(
            f"output {output} overlaps source {source}; write the artifact to a folder of its own"
        )
