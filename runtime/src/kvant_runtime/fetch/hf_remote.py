"""hf:// sources through `huggingface_hub`: the revision resolved to its commit, LFS sha256 per file.

Kvant writes no Hugging Face HTTP client: `HfApi.model_info` lists the files with their LFS sha256 (or
git blob id), and huggingface_hub's own downloader (`file_download.http_get`, with the Hub's headers
and redirects) fetches each one. `hf_hub_download` is not used: in huggingface_hub 2.4 it names its
partial file per process and deletes it on failure, so a restarted pod would start every file from
byte 0. Here the partial file is `<path>.part` in the staging folder, and `http_get` continues it
with a Range request (`resume_size`), across retries and pod restarts alike.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import huggingface_hub
from huggingface_hub import errors as hf_errors
from huggingface_hub.file_download import http_get
from huggingface_hub.utils._headers import build_hf_headers

from kvant_runtime.fetch.remote import (
    Check,
    FetchError,
    RemoteFile,
    Snapshot,
    Translated,
    safe_relative,
    selected,
)


class HfRemote:
    def __init__(
        self,
        uri: str,
        revision: str | None,
        patterns: tuple[str, ...],
        endpoint: str | None,
        token: str | None,
    ) -> None:
        self.uri, self.revision, self.patterns = uri, revision or "main", patterns
        self.repo_id = uri.removeprefix("hf://").strip("/")
        self.endpoint, self.token = endpoint, token
        self.commit: str | None = None  # set by resolve(); files are read from it, not from a branch

    def resolve(self) -> Snapshot:
        api = huggingface_hub.HfApi(endpoint=self.endpoint, token=self.token or False)
        with Translated(f"{self.uri}: listing revision {self.revision!r}", _translate):
            info = api.model_info(self.repo_id, revision=self.revision, files_metadata=True)
        if not info.sha:
            raise FetchError(
                "unavailable", f"{self.uri}: the Hub gave no commit for revision {self.revision!r}"
            )
        siblings = {s.rfilename: s for s in info.siblings or []}
        files = []
        for path in selected(sorted(siblings), self.patterns):
            s = siblings[safe_relative(path, self.uri)]
            lfs = s.lfs
            files.append(
                RemoteFile(
                    path=path,
                    size=int(lfs.size if lfs else s.size or 0),
                    sha256=lfs.sha256 if lfs else None,
                    git_sha1=None if lfs else s.blob_id,
                )
            )
        if not files:
            raise FetchError(
                "not-found",
                f"{self.uri}@{info.sha}: no file matches {list(self.patterns)} (the repository has "
                f"{len(siblings)} files); set spec.source.allowPatterns",
            )
        self.commit = info.sha
        return Snapshot(self.uri, info.sha, f"hf/{self.repo_id}/{info.sha}", tuple(files))

    def checks(self, file: RemoteFile) -> list[Check]:
        return [GitBlobCheck(file.size, file.git_sha1)] if file.git_sha1 else []

    def fill(self, file: RemoteFile, part: Path, start: int) -> None:
        assert self.commit is not None, "resolve() first"
        url = huggingface_hub.hf_hub_url(
            self.repo_id, file.path, revision=self.commit, endpoint=self.endpoint
        )
        headers = build_hf_headers(token=self.token or False)
        with Translated(f"{self.uri}: downloading {file.path}", _translate), part.open("ab") as out:
            http_get(url, out, resume_size=start, headers=headers, expected_size=file.size)


def _translate(error: BaseException, doing: str) -> FetchError | None:
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, hf_errors.GatedRepoError) or status in (401, 403):
        return FetchError(
            "auth",
            f"{doing}: access denied ({status}); check the token in spec.source.credentialsSecret (HF_TOKEN)",
        )
    if isinstance(error, hf_errors.RevisionNotFoundError):
        return FetchError("not-found", f"{doing}: the revision does not exist; check spec.source.revision")
    if isinstance(error, hf_errors.RepositoryNotFoundError):
        return FetchError(
            "not-found",
            f"{doing}: the repository does not exist (or is private and the token cannot read it)",
        )
    if isinstance(error, hf_errors.EntryNotFoundError):
        return FetchError("not-found", f"{doing}: the file does not exist at this revision")
    if isinstance(error, OSError | hf_errors.HfHubHTTPError):
        return FetchError("unavailable", f"{doing}: {type(error).__name__}: {error}", retryable=True)
    return None


class GitBlobCheck:
    """Git's object id of a file (sha1 of a `blob <size>` header and the bytes), which the Hub reports
    for files kept outside LFS."""

    def __init__(self, size: int, expected: str) -> None:
        self.expected = expected
        self.digest = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)

    def update(self, chunk: bytes) -> None:
        self.digest.update(chunk)

    def problem(self) -> str:
        actual = self.digest.hexdigest()
        return "" if actual == self.expected else f"git blob {actual}, the remote lists {self.expected}"
