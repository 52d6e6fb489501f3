"""Earlier commits of this repository as images the local cluster can run: an upgrade's "before".

A real cluster upgrades from one set of images to another. The local node agent has no container
runtime: it runs Kvant's images (`kvant-operator`, `kvant-runtime`) as processes of this checkout's
virtualenv, whatever their tag. So that an upgrade test can start from what an earlier commit built,
an image tagged `git-<commit>` runs that commit's source instead: its packages lead `PYTHONPATH`, and
the virtualenv supplies the third-party dependencies. That holds while every dependency the commit
pins is pinned here alike (this checkout may add packages the old code never imports, but neither
change nor drop one); `check_out` refuses any other commit rather than run it half-built.

The commit's tree is extracted once with `git archive` into the cache folder, keyed by the commit.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

from kvant_dev.toolchain import cache_dir

REPO = Path(__file__).resolve().parents[3]
TAG_PREFIX = "git-"
_TAG = re.compile(rf"^{TAG_PREFIX}(?P<commit>[0-9a-f]{{12}})$")
# The folders whose src/ holds an image's packages (the runtime and operator images are built from
# these; devcluster/ is the local cluster itself, which always runs from this checkout).
PACKAGES = ("cli", "contracts", "kernels", "operator", "runtime")
# A pod of an earlier commit's image runs that commit's development package too: the `kvant` command
# loads every installed package's commands (kvant_cli's entry points), and this checkout's kvant_dev
# would import what the earlier contracts lack (it did: kvant_contracts.kube_object). A real image
# has no kvant_dev at all; the earlier one only registers its commands.
ON_PATH = (*PACKAGES, "devcluster")
# What must match for an earlier commit's code to run in this checkout's virtualenv.
PINS = ("constraints.txt", *(f"{package}/pyproject.toml" for package in ON_PATH))


class ReleaseError(RuntimeError):
    pass


def releases_dir() -> Path:
    return cache_dir() / "releases"


def image_tag(commit: str) -> str:
    """The tag under which an image runs `commit`'s source (a full or 12-digit commit id)."""
    return f"{TAG_PREFIX}{commit[:12]}"


def tree_for_tag(tag: str) -> Path | str | None:
    """The source tree a tag names: None for an ordinary tag, or the tree's folder; a string says why
    a `git-` tag cannot run (its tree is not checked out)."""
    match = _TAG.match(tag)
    if match is None:
        return None
    tree = releases_dir() / match["commit"]
    if not tree.is_dir():
        return f"commit {match['commit']} is not checked out in {releases_dir()} (releases.check_out)"
    return tree


def python_path(tree: Path) -> str:
    """`PYTHONPATH` for a process that runs `tree`'s packages ahead of the virtualenv's."""
    return ":".join(str(tree / package / "src") for package in ON_PATH)


def check_out(commit: str, repo: Path = REPO) -> tuple[str, Path]:
    """Extract `commit`'s tree into the cache (once) and return its image tag and folder."""
    full = _git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if full is None:
        raise ReleaseError(
            f"commit {commit} is not in {repo}'s history: a shallow clone lacks it "
            "(git fetch --unshallow), or the commit id is wrong"
        )
    changed = [path for path in PINS if not pins_kept(repo, full, path)]
    if changed:
        raise ReleaseError(
            f"commit {full[:12]} pins other dependencies than this checkout ({', '.join(changed)}): "
            "its code cannot run in this checkout's virtualenv"
        )
    tag = image_tag(full)
    tree = releases_dir() / tag.removeprefix(TAG_PREFIX)
    if tree.is_dir():
        return tag, tree
    releases_dir().mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{tree.name}-", dir=releases_dir()))
    try:
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", full], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(staging)], input=archive, check=True, capture_output=True)
        staging.rename(tree)  # whole or absent: a second caller finds the complete tree
    except OSError:
        if not tree.is_dir():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return tag, tree


def pins_kept(repo: Path, commit: str, path: str) -> bool:
    """Whether this checkout's `path` keeps what `commit`'s pins: every constraint line, every
    dependency, and the rest of a pyproject unchanged (its entry points decide what the venv runs)."""
    old, new = (
        _git(repo, "show", f"{commit}:{path}"),
        (repo / path).read_text() if (repo / path).is_file() else None,
    )
    if old is None or new is None:
        return old == new
    if path.endswith("pyproject.toml"):
        before, after = tomllib.loads(old), tomllib.loads(new)
        old_deps = set(before.get("project", {}).pop("dependencies", []))
        new_deps = set(after.get("project", {}).pop("dependencies", []))
        return old_deps <= new_deps and before == after
    return _pins(old) <= _pins(new)


def _pins(text: str) -> set[str]:
    """A constraints file's requirement lines, without comments and blank lines."""
    return {line.split("#", 1)[0].strip() for line in text.splitlines()} - {""}


def _git(repo: Path, *args: str) -> str | None:
    """git's stdout, or None where it exits non-zero (an unknown commit, a differing file)."""
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None
