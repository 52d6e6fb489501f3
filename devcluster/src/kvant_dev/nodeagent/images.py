"""The image → entrypoint map: which images the local node agent can run, and how."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

_MAP_FILE = Path(__file__).with_name("images.yaml")


class UnsupportedImageError(ValueError):
    pass


@dataclass(frozen=True)
class LocalImage:
    name: str
    entrypoint: list[str]


def load_image_map() -> dict[str, LocalImage]:
    raw: dict[str, dict[str, list[str]]] = yaml.safe_load(_MAP_FILE.read_text())
    return {name: LocalImage(name, list(spec["entrypoint"])) for name, spec in raw.items()}


def repository_name(image: str) -> str:
    without_digest = image.split("@", 1)[0]
    last = without_digest.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def resolve(image: str, image_map: dict[str, LocalImage]) -> LocalImage:
    found = image_map.get(repository_name(image))
    if found is None:
        runnable = ", ".join(sorted(image_map))
        raise UnsupportedImageError(
            f"image {image!r} cannot run on the Kvant local node agent (no container runtime here); "
            f"runnable images end in one of: {runnable} (see kvant_dev/nodeagent/images.yaml)"
        )
    return found
