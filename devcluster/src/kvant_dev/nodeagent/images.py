"""The image → entrypoint map: which images the local node agent can run, and how."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from kvant_dev.releases import tree_for_tag

_MAP_FILE = Path(__file__).with_name("images.yaml")


class UnsupportedImageError(ValueError):
    pass


@dataclass(frozen=True)
class LocalImage:
    name: str
    entrypoint: list[str]
    # The Python environment the image's processes run from (its bin/ leads PATH), where it is not the
    # project's own: the real SGLang engine has an environment of its own (hack/engine-image.sh).
    bin_dir: Path | None = None
    missing: str | None = None  # why the image cannot run here (its environment is not built)
    # Kvant's own images: a `git-<commit>` tag runs that commit's source (kvant_dev.releases).
    project: bool = False
    source_tree: Path | None = None  # the earlier commit's tree this image runs, where its tag names one


def load_image_map(environments: Callable[[str], Path | None] | None = None) -> dict[str, LocalImage]:
    """Every runnable image; `environments` finds a named environment's folder (None: not built)."""
    raw: dict[str, dict[str, object]] = yaml.safe_load(_MAP_FILE.read_text())
    images = {}
    for name, spec in raw.items():
        entrypoint = [str(part) for part in spec["entrypoint"]]  # type: ignore[attr-defined]
        environment = spec.get("environment")
        if environment is None:
            images[name] = LocalImage(name, entrypoint, project=bool(spec.get("project", False)))
            continue
        found = environments(str(environment)) if environments is not None else None
        missing = (
            None if found is not None else f"its environment {environment!r} is not built: {spec['build']}"
        )
        images[name] = LocalImage(name, entrypoint, found / "bin" if found else None, missing)
    return images


def repository_name(image: str) -> str:
    return _last_component(image).split(":", 1)[0]


def image_tag(image: str) -> str:
    last = _last_component(image)
    return last.split(":", 1)[1] if ":" in last else "latest"


def _last_component(image: str) -> str:
    return image.split("@", 1)[0].rsplit("/", 1)[-1]


def resolve(image: str, image_map: dict[str, LocalImage]) -> LocalImage:
    found = image_map.get(repository_name(image))
    if found is None:
        runnable = ", ".join(sorted(image_map))
        raise UnsupportedImageError(
            f"image {image!r} cannot run on the Kvant local node agent (no container runtime here); "
            f"runnable images end in one of: {runnable} (see kvant_dev/nodeagent/images.yaml)"
        )
    if found.missing is not None:
        raise UnsupportedImageError(
            f"image {image!r} cannot run on the Kvant local node agent: {found.missing}"
        )
    if not found.project:
        return found
    tree = tree_for_tag(image_tag(image))
    if isinstance(tree, str):
        raise UnsupportedImageError(f"image {image!r} cannot run on the Kvant local node agent: {tree}")
    return found if tree is None else replace(found, source_tree=tree)
