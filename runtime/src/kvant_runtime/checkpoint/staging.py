"""The output directory's life cycle: a staging prefix, per-shard completion markers, and publication.

    OUTPUT/.kvant-partial/recipe.json        what this partial output is being built from
    OUTPUT/.kvant-partial/<shard>.tmp        a shard being written (a killed run leaves it; rerun rewrites it)
    OUTPUT/.kvant-partial/<shard>            a finished shard ...
    OUTPUT/.kvant-partial/<shard>.done.json  ... and its marker (sha256, size, tensor names), written after
    OUTPUT/kvant-manifest.json               written last, atomically: published iff it exists

Publishing renames the staged files into OUTPUT, then writes the manifest and removes the staging
prefix. Consumers (the operator, SGLang pods) treat a directory without the manifest as absent.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from kvant_contracts.artifact_manifest import MANIFEST_NAME
from kvant_runtime.checkpoint.errors import CheckpointError

STAGING_DIR = ".kvant-partial"
RECIPE_FILE = "recipe.json"
MARKER_SUFFIX = ".done.json"


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as file:
        file.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


class Staging:
    def __init__(self, output: Path) -> None:
        self.output = output
        self.dir = output / STAGING_DIR

    @property
    def manifest_path(self) -> Path:
        return self.output / MANIFEST_NAME

    def published_manifest(self) -> dict[str, Any] | None:
        if not self.manifest_path.is_file():
            return None
        data: dict[str, Any] = json.loads(self.manifest_path.read_text())
        return data

    def claim(self, identity: dict[str, Any]) -> None:
        """Creates the staging prefix for `identity`, or checks that an existing one was made for the same."""
        self.dir.mkdir(parents=True, exist_ok=True)
        recipe_path = self.dir / RECIPE_FILE
        tmp = self.dir / f".{RECIPE_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(identity, indent=2, sort_keys=True) + "\n")
        try:
            os.link(tmp, recipe_path)  # atomic create-if-absent, safe against concurrent workers
        except FileExistsError:
            self.check_identity(identity)
        finally:
            tmp.unlink()

    def check_identity(self, identity: dict[str, Any]) -> None:
        recipe_path = self.dir / RECIPE_FILE
        if not recipe_path.is_file():
            raise CheckpointError(
                f"{self.output}: nothing has been converted here yet (no {STAGING_DIR}/{RECIPE_FILE})"
            )
        existing = json.loads(recipe_path.read_text())
        if isinstance(existing.get("recipe"), dict):  # staged before recipes named a method: rtn
            existing["recipe"] = {"method": "rtn", **existing["recipe"]}
        if existing != identity:
            raise CheckpointError(
                f"{self.dir} holds a partial conversion made with {json.dumps(existing, sort_keys=True)}, "
                f"not {json.dumps(identity, sort_keys=True)}; rerun with the same source and flags, "
                "or delete that directory to start over"
            )

    def partial_path(self, shard: str) -> Path:
        return self.dir / f"{shard}.tmp"

    def staged_path(self, name: str) -> Path:
        return self.dir / name

    def marker(self, shard: str) -> dict[str, Any] | None:
        """The shard's marker if it is finished: its file present (staged or published) at full size."""
        marker_path = self.dir / (shard + MARKER_SUFFIX)
        if not marker_path.is_file():
            return None
        marker: dict[str, Any] = json.loads(marker_path.read_text())
        for place in (self.dir / shard, self.output / shard):
            if place.is_file() and place.stat().st_size == marker["bytes"]:
                return marker
        return None

    def finish_shard(self, shard: str, marker: dict[str, Any]) -> None:
        os.replace(self.partial_path(shard), self.dir / shard)
        write_json_atomic(self.dir / (shard + MARKER_SUFFIX), marker)

    def publish(self, files: list[str], manifest: dict[str, Any]) -> None:
        """Moves the staged files into place, then writes the manifest; safe to repeat after a kill."""
        for name in files:
            staged = self.dir / name
            if staged.exists():
                os.replace(staged, self.output / name)
            elif not (self.output / name).exists():
                raise CheckpointError(
                    f"{name} is neither staged in {self.dir} nor published in {self.output}"
                )
        write_json_atomic(self.manifest_path, manifest)
        shutil.rmtree(self.dir, ignore_errors=True)
