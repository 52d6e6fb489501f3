"""The source seam: each source type maps a `spec.source.uri` to what a pod needs to read the checkpoint.

A source type says which URIs it serves (a pattern that RE2, hence the CRD's CEL rule, and Python read
alike), how a person writes one, and where a pod finds the folder: a volume, its mount path and the
path below it. The API accepts exactly the schemes of the types registered here, so a URI that no type
serves is refused at `kubectl apply`, not later by a reconcile.

A fetched type (hf://, s3://) is read from where its fetch Job published it (`status.source.location`,
a folder on the sources volume named by the resolved revision), so it has no `locate` of its own: the
fetch step (`reconcile.fetch_step`) runs first, and `locate_source` is given the fetched location.
The renderers ask `locate_source` and never look at a scheme.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

SOURCE_MOUNT = "/source"


@dataclass(frozen=True)
class Location:
    """A folder reachable from pods: a volume, where it is mounted, and the path below the mount."""

    volume: dict[str, Any]
    mount_path: str
    sub_path: str

    @property
    def path(self) -> str:
        return str(PurePosixPath(self.mount_path) / self.sub_path) if self.sub_path else self.mount_path


@dataclass(frozen=True)
class SourceType:
    scheme: str
    pattern: str  # the whole URI; RE2 and Python agree on it
    form: str  # how a person writes one, for error messages
    locate: Callable[[str], Location] | None  # None: fetched first, read from the fetched location


def _host_path(uri: str) -> Location:
    path = uri.removeprefix("file://")
    return Location({"name": "source", "hostPath": {"path": path, "type": "Directory"}}, SOURCE_MOUNT, "")


def _claim(uri: str) -> Location:
    claim, _, path = uri.removeprefix("pvc://").partition("/")
    volume = {"name": "source", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
    return Location(volume, SOURCE_MOUNT, path.strip("/"))


SOURCE_TYPES: tuple[SourceType, ...] = (
    SourceType("pvc", r"pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/.*)?", "pvc://<claim>/<path>", _claim),
    SourceType("file", r"file:///.+", "file:///<absolute path on the node>", _host_path),
    # Hub repository ids: ORG/NAME, each of letters, digits, '-', '_' and '.', at most 96 characters.
    SourceType(
        "hf",
        r"hf://[A-Za-z0-9][-A-Za-z0-9_.]{0,95}/[A-Za-z0-9][-A-Za-z0-9_.]{0,95}",
        "hf://<org>/<name>",
        None,
    ),
    # S3 bucket names (3-63 of lowercase letters, digits, '.' and '-'), then an optional key prefix.
    SourceType(
        "s3", r"s3://[a-z0-9][-a-z0-9.]{1,61}[a-z0-9](/[-A-Za-z0-9_./]*)?", "s3://<bucket>/<prefix>", None
    ),
)
# What the API accepts: exactly the URIs some source type serves.
SOURCE_URI = "^(" + "|".join(t.pattern for t in SOURCE_TYPES) + ")$"
SOURCE_FORMS = " or ".join(t.form for t in SOURCE_TYPES)


def file_source_refusal(uri: str, allowed_prefixes: tuple[str, ...]) -> str | None:
    """Why a file:// source may not be used here, or None. A file:// source is a hostPath, so the
    operator (configured by the chart) names the node folders models may come from."""
    if not uri.startswith("file://"):
        return None
    path = posixpath.normpath(uri.removeprefix("file://"))
    for prefix in allowed_prefixes:
        root = posixpath.normpath(prefix)
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return None
    allowed = ", ".join(allowed_prefixes) or "none: this operator takes no file:// source"
    return (
        f"spec.source.uri {uri!r}: a file:// source must lie under one of the node folders the operator "
        f"allows ({allowed}; the chart's fileSourcePrefixes); use pvc:// otherwise"
    )


def source_type(uri: str) -> SourceType:
    scheme = uri.split("://", 1)[0]
    for candidate in SOURCE_TYPES:
        if candidate.scheme == scheme:
            return candidate
    raise ValueError(f"spec.source.uri {uri!r}: no source type serves {scheme}://; use {SOURCE_FORMS}")


def is_fetched(uri: str) -> bool:
    return source_type(uri).locate is None


def locate_source(uri: str, fetched: str | None = None) -> Location:
    """Where pods read the source `uri` (which the API has already matched against SOURCE_URI). A
    fetched type needs `fetched`, the pvc:// location its fetch published (status.source.location)."""
    locate = source_type(uri).locate
    if locate is not None:
        return locate(uri)
    if fetched is None:
        raise ValueError(f"spec.source.uri {uri!r} is read once fetched, and has not been fetched yet")
    return _claim(fetched)
