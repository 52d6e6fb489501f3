"""One fetch: resolve, download in parallel, verify each file, publish the folder atomically.

    ROOT/<folder>/.kvant-partial-<staging id>/...   files in flight; a killed pod leaves them to resume
    ROOT/<folder>/<files>                           moved in once every file is verified
    ROOT/<folder>/kvant-manifest.json               written last: the folder is published iff it exists

`<folder>` is content-addressed by the resolved revision (hf/ORG/NAME/<commit>, s3/.../<listing digest>),
so every fetch of the same revision shares it, and a folder that is already published is not fetched
again. Each request stages apart (its own staging id), so two fetches of one revision never write the
same partial file; whichever publishes second finds the manifest and publishes nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from kvant_contracts import backoff
from kvant_contracts.artifact_manifest import (
    MANIFEST_NAME,
    MANIFEST_VERSION,
    artifact_digest,
    verify_artifact,
)
from kvant_contracts.job_lines import FetchProgress, SourceResult
from kvant_runtime.fetch.remote import FetchError, Remote, RemoteFile, Snapshot, safe_relative

STAGING_PREFIX = ".kvant-partial-"
_PROGRESS_INTERVAL_S = 2.0


@dataclass(frozen=True)
class FetchOptions:
    staging_id: str = "local"
    workers: int = 8
    attempts: int = 3  # per file, for hash mismatches and transient errors
    backoff_s: float = 1.0


def fetch(remote: Remote, root: Path, options: FetchOptions, out: TextIO) -> SourceResult:
    snapshot = remote.resolve()
    # The folder comes from the URI (a repo id, a bucket): by hand, `kvant fetch` meets URIs the API
    # never checked, and none may publish outside ROOT.
    folder = root / safe_relative(snapshot.folder, snapshot.uri)
    if (folder / MANIFEST_NAME).is_file():
        manifest = verify_artifact(folder, None)  # sizes: a published folder was hashed when fetched
        return _result(snapshot, manifest.digest)
    staging = folder / (STAGING_PREFIX + options.staging_id)
    staging.mkdir(parents=True, exist_ok=True)
    _check_space(snapshot, folder, staging)
    progress = _Progress(snapshot, staging, out)
    progress.start()
    try:
        with ThreadPoolExecutor(max(1, options.workers), thread_name_prefix="fetch") as pool:
            order = sorted(snapshot.files, key=lambda f: -f.size)  # the longest first: less tail
            fetched = pool.map(lambda f: _fetch_file(remote, f, staging, options, progress.file_done), order)
            hashes = dict(zip([f.path for f in order], fetched, strict=True))
    finally:
        progress.stop()
    digest = _publish(snapshot, folder, staging, hashes)
    return _result(snapshot, digest)


def _fetch_file(
    remote: Remote, file: RemoteFile, staging: Path, options: FetchOptions, done: Callable[[], None]
) -> str:
    """The file's sha256 once it is in staging and matches what the remote says; retried, then fails."""
    kind, problem = "unavailable", ""
    for attempt in range(1, options.attempts + 1):
        try:
            local = _download(remote, file, staging)
            sha256, problem = _verify(remote, file, local)
            if not problem:
                done()
                return sha256
            kind = "integrity"
            local.unlink()  # never resume from bytes that failed verification
        except FetchError as error:
            if not error.retryable:
                raise
            kind, problem = error.kind, str(error)
        if attempt < options.attempts:
            time.sleep(backoff.delay(attempt, options.backoff_s))
    raise FetchError(kind, f"{file.path}: {problem} (after {options.attempts} attempts)")


def _download(remote: Remote, file: RemoteFile, staging: Path) -> Path:
    """The file complete in staging: `<path>.part` grows (from where an earlier attempt or pod left
    it) until it has every byte, then takes the file's name. The caller verifies it."""
    target = staging / file.path
    if target.is_file() and target.stat().st_size == file.size:
        return target  # an earlier attempt finished it
    part = target.with_name(target.name + ".part")
    target.parent.mkdir(parents=True, exist_ok=True)
    start = part.stat().st_size if part.exists() else 0
    if start > file.size:  # not a prefix of this file: start over
        part.unlink()
        start = 0
    if start < file.size:
        remote.fill(file, part, start)
    part.replace(target)
    return target


def _verify(remote: Remote, file: RemoteFile, local: Path) -> tuple[str, str]:
    """The local file's sha256, and why it is not the file the remote listed ('' when it is). One
    read feeds sha256 and every digest the remote offers to compare with."""
    size = local.stat().st_size
    if size != file.size:
        return "", f"{size} bytes, the remote lists {file.size} bytes"
    sha256 = hashlib.sha256()
    checks = remote.checks(file)
    with local.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            sha256.update(chunk)
            for check in checks:
                check.update(chunk)
    actual = sha256.hexdigest()
    if file.sha256 is not None and actual != file.sha256:
        return actual, f"sha256 {actual}, the remote lists {file.sha256}"
    return actual, next((p for p in (c.problem() for c in checks) if p), "")


def _check_space(snapshot: Snapshot, folder: Path, staging: Path) -> None:
    have = _tree_bytes(staging)
    needed = snapshot.bytes - have
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise FetchError(
            "disk",
            f"{snapshot.uri}@{snapshot.revision[:12]}: needs {needed} more bytes ({needed / 1e9:.2f} GB) "
            f"on the sources volume, which has {free} free; grow the volume or free space",
        )


def _publish(snapshot: Snapshot, folder: Path, staging: Path, hashes: dict[str, str]) -> str:
    if (folder / MANIFEST_NAME).is_file():  # another fetch of this revision published first
        shutil.rmtree(staging, ignore_errors=True)
        return verify_artifact(folder, None).digest
    for file in snapshot.files:
        target = folder / file.path
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / file.path, target)
    digest = artifact_digest(hashes)
    manifest = {
        "kvantManifestVersion": MANIFEST_VERSION,
        "files": {f.path: {"sha256": hashes[f.path], "bytes": f.size} for f in snapshot.files},
        "digest": digest,
        "source": {
            "uri": snapshot.uri,
            "revision": snapshot.revision,
            "remote": {
                f.path: {
                    k: v
                    for k, v in (("etag", f.etag), ("versionId", f.version_id), ("lfsSha256", f.sha256))
                    if v
                }
                for f in snapshot.files
            },
        },
    }
    tmp = folder / f".{MANIFEST_NAME}.{os.getpid()}.tmp"
    with tmp.open("w") as handle:
        handle.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, folder / MANIFEST_NAME)
    shutil.rmtree(staging, ignore_errors=True)
    return digest


def _result(snapshot: Snapshot, digest: str) -> SourceResult:
    return SourceResult(
        sourceDigest=digest,
        revision=snapshot.revision,
        path=snapshot.folder,
        bytes=snapshot.bytes,
        files=len(snapshot.files),
    )


def _tree_bytes(path: Path) -> int:
    total = 0
    for base, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(FileNotFoundError):  # renamed by a download finishing meanwhile
                total += os.lstat(os.path.join(base, name)).st_size
    return total


class _Progress:
    """Prints FetchProgress lines every few seconds, measuring the staging folder (the bytes on disk,
    which is also what a resumed fetch starts from)."""

    def __init__(self, snapshot: Snapshot, staging: Path, out: TextIO) -> None:
        self.snapshot, self.staging, self.out = snapshot, staging, out
        self.files_done = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fetch-progress", daemon=True)
        self._started = time.monotonic()
        self._at_start = _tree_bytes(staging)

    def start(self) -> None:
        self._emit("start")
        self._thread.start()

    def file_done(self) -> None:
        with self._lock:
            self.files_done += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._emit("done" if self.files_done == len(self.snapshot.files) else "progress")

    def _run(self) -> None:
        while not self._stop.wait(_PROGRESS_INTERVAL_S):
            self._emit("progress")

    def _emit(self, event: str) -> None:
        total = self.snapshot.bytes
        done = total if event == "done" else min(total, _tree_bytes(self.staging))
        elapsed = max(time.monotonic() - self._started, 1e-6)
        rate = max(0.0, (done - self._at_start) / elapsed)
        line = FetchProgress(
            event=event,
            filesDone=self.files_done,
            filesTotal=len(self.snapshot.files),
            bytesDone=done,
            bytesTotal=total,
            bytesPerSecond=round(rate, 1),
            etaSeconds=round((total - done) / rate, 1) if rate > 0 else None,
        )
        with self._lock:
            self.out.write(json.dumps(line.fields()) + "\n")
            self.out.flush()
