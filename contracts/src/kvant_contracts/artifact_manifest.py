"""`kvant-manifest.json`: what an artifact folder holds, and the digest that names it.

Defined once for every side: the converter (`kvant_runtime.convert.artifact_files`) writes it, calibration
rewrites it under a new digest, and the launcher and the evaluator check it before SGLang or torch
spend minutes loading weights. The keys read here:

    {
      "kvantManifestVersion": 1,
      "files": {"model-00001-of-00002.safetensors": {"sha256": "<hex>", "bytes": 123}, ...},
      "digest": "sha256:<hex>",
      ... (recipe, source revision, sizes: not needed to verify)
    }

The artifact digest is the sha256 of the `sha256sum`-style listing of the
files, sorted by path: one line `<sha256>  <path>\\n` per file. It therefore
changes when any file's content, name, or the set of files changes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MANIFEST_NAME = "kvant-manifest.json"
MANIFEST_VERSION = 1  # kvantManifestVersion: what writers write
# The bytes an artifact holds for a given recipe: bumped when the converter or the calibrator writes
# different bytes for the same recipe, and only then. It is part of the artifact key, so a bump makes
# every model convert again, once. Until 0.1.0 the key held the runtime image's tag instead, so every
# release of the image reconverted every model and restarted every engine on the new path; "0.1.0" is
# that last tag, so keys made then stay valid.
ARTIFACT_BYTES_VERSION = "0.1.0"


class ManifestError(ValueError):
    """The artifact does not match its manifest; the message names the file."""


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    bytes: int


@dataclass(frozen=True)
class Manifest:
    files: dict[str, FileEntry]
    digest: str


def artifact_digest(file_hashes: Mapping[str, str]) -> str:
    listing = "".join(f"{file_hashes[path]}  {path}\n" for path in sorted(file_hashes))
    return "sha256:" + hashlib.sha256(listing.encode()).hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(artifact: Path) -> Manifest:
    path = artifact / MANIFEST_NAME
    try:
        raw = json.loads(path.read_text())
        files = {name: FileEntry(str(e["sha256"]), int(e["bytes"])) for name, e in raw["files"].items()}
        return Manifest(files, str(raw["digest"]))
    except FileNotFoundError:
        raise ManifestError(f"{path} does not exist; is {artifact} a Kvant-converted artifact?") from None
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as error:
        raise ManifestError(
            f"{path} is not a Kvant manifest ({type(error).__name__}: {error}); "
            "it needs 'files' {path: {sha256, bytes}} and 'digest'"
        ) from None


def verify_artifact(artifact: Path, expected_digest: str | None, content: bool = False) -> Manifest:
    """Check the manifest's digest, then every listed file's size (and, with `content`, its sha256)."""
    manifest = read_manifest(artifact)
    recomputed = artifact_digest({name: entry.sha256 for name, entry in manifest.files.items()})
    if recomputed != manifest.digest:
        raise ManifestError(
            f"{artifact / MANIFEST_NAME}: the digest {manifest.digest} does not match its file list "
            f"({recomputed}); the manifest was edited or truncated"
        )
    if expected_digest is not None and expected_digest != manifest.digest:
        raise ManifestError(
            f"{artifact} holds artifact {manifest.digest}, but the plan expects {expected_digest}"
        )
    for name, entry in sorted(manifest.files.items()):
        _verify_file(artifact / name, entry, content)
    return manifest


def _verify_file(path: Path, entry: FileEntry, content: bool) -> None:
    if not path.is_file():
        raise ManifestError(f"{path} is listed in the manifest but missing")
    size = path.stat().st_size
    if size != entry.bytes:
        raise ManifestError(f"{path} has {size} bytes, the manifest says {entry.bytes}")
    if content and (actual := file_sha256(path)) != entry.sha256:
        raise ManifestError(f"{path} has sha256 {actual}, the manifest says {entry.sha256}")
