"""What a remote source lists, and the one interface each remote kind (hf://, s3://) implements."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

# What serving needs, when the spec names no `allowPatterns`: weights, their index, the configs, the
# tokenizer and chat template, a multimodal model's processor configs (SGLang's processor reads them,
# and the gate counts image tokens from them), and the model's own Python (trust_remote_code models
# such as Kimi-K2).
DEFAULT_PATTERNS: tuple[str, ...] = (
    "*.safetensors",
    "*.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "tokenizer*",
    "special_tokens_map.json",
    "vocab.*",
    "merges.txt",
    "*.tiktoken",
    "tiktoken.model",
    "chat_template*",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
    "*.py",
)


class FetchError(RuntimeError):
    """A fetch that cannot succeed as asked; the message names the URI and the cause. `kind` is one of
    auth, not-found, integrity, disk, input or unavailable; `retryable` says whether trying again
    later may help."""

    def __init__(self, kind: str, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.kind, self.retryable = kind, retryable


@dataclass(frozen=True)
class RemoteFile:
    """One file of a resolved source, and what the remote says its bytes are."""

    path: str  # relative, '/'-separated
    size: int
    sha256: str | None = None  # known up front (the Hub's LFS sha256)
    git_sha1: str | None = None  # the Hub's git blob id, for files outside LFS
    etag: str | None = None  # S3: an MD5, or for multipart uploads the MD5 of the parts' MD5s
    part_size: int | None = None  # S3 multipart: the size of every part but the last
    version_id: str | None = None


class Check(Protocol):
    """A digest the remote offers for one file, fed the file's bytes in order."""

    def update(self, chunk: bytes) -> None: ...

    def problem(self) -> str:
        """Why the bytes are not what the remote listed, or ''."""
        ...


@dataclass(frozen=True)
class Snapshot:
    """A source pinned to one revision: what will be fetched, and where it is published."""

    uri: str
    revision: str  # a commit sha (hf://), a digest of the listing (s3://)
    folder: str  # relative to the sources root; content-addressed by the revision
    files: tuple[RemoteFile, ...] = field(default_factory=tuple)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


class Remote(Protocol):
    def resolve(self) -> Snapshot: ...

    def checks(self, file: RemoteFile) -> list[Check]:
        """The digests besides sha256 (which the fetcher always computes) to verify `file` with."""
        ...

    def fill(self, file: RemoteFile, part: Path, start: int) -> None:
        """Appends `file`'s bytes from offset `start` to `part`, which holds the first `start` bytes.
        The fetcher owns the partial file's life cycle (resume, discard, publish) and verification;
        progress is measured on the staging folder, how huggingface_hub (tqdm only) can be followed."""
        ...


def selected(paths: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The paths whose file name or whole path matches a pattern (fnmatch, case-sensitive)."""
    return [
        p
        for p in paths
        if any(
            fnmatch.fnmatchcase(p, pat) or fnmatch.fnmatchcase(p.rsplit("/", 1)[-1], pat) for pat in patterns
        )
    ]


def safe_relative(path: str, uri: str) -> str:
    """`path` if it stays inside the folder it is published into; a remote naming `../x` or `/etc/x`
    must not write outside it."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in path:
        raise FetchError(
            "input", f"{uri}: the remote lists a file named {path!r}, which is not a safe relative path"
        )
    return path


class Translated:
    """Turns a client library's errors into a FetchError that names what was being done (the URI,
    the file) and the cause; `translate` says how, and None lets an error through unchanged."""

    def __init__(self, doing: str, translate: Callable[[BaseException, str], FetchError | None]) -> None:
        self.doing, self.translate = doing, translate

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        if error is None or isinstance(error, FetchError):
            return
        found = self.translate(error, self.doing)
        if found is not None:
            raise found from None
