"""A STAND-IN for the Hugging Face Hub: local folders served to the real `huggingface_hub` client.

Like the engine simulator stands in for SGLang, this exists only because no real Hub runs offline.
(olah 0.5.4, a Hub mirror, was tried first: serving a local git repository it lists files without
size or LFS sha256, ignores Range, and answers a missing revision with 401 RepoNotFound.) Kvant's
tests and local cluster point `hf://` sources at it. It implements exactly what Kvant's fetcher
calls, answered the way the Hub answers, and nothing else:

- `GET /api/models/{org}/{name}/revision/{revision}[?blobs=true]` (`HfApi.model_info`): `sha` is the
  resolved commit; with `blobs` each sibling has `size` and `blobId` (its git blob id) and, for LFS
  files (`*.safetensors` and anything over 1 MiB), `lfs: {sha256, size, pointerSize}`.
- `HEAD|GET /{org}/{name}/resolve/{revision}/{path}` (`hf_hub_download`): `X-Repo-Commit`, `ETag` (the
  LFS sha256, or the git blob id), `X-Linked-Etag`/`X-Linked-Size` for LFS files, `Content-Length`;
  no redirect and no Xet headers, so the client downloads over plain HTTP. One `Range: bytes=N-` or
  `bytes=N-M` gets 206 with `Content-Range`; any other Range gets 416.
- Errors as the Hub gives them: 404 with `X-Error-Code: RepoNotFound`, `RevisionNotFound` or
  `EntryNotFound` (huggingface_hub raises RepositoryNotFoundError, RevisionNotFoundError,
  RemoteEntryNotFoundError); 400 for a repo id or path that is not well-formed (BadRequestError).
  Started with a token, a request without `Authorization: Bearer <token>` or with another token gets
  the Hub's answer to a bad token: 401 with `X-Error-Message: Invalid credentials in Authorization
  header`. huggingface_hub then raises a plain HfHubHTTPError with status 401, deliberately not
  RepositoryNotFoundError or GatedRepoError (a subclass of it), so a token problem is never read as
  "no such repository".

Served tree, written by `publish` (or by hand):

    ROOT/<org>/<name>/commits/<sha>/<files...>   one commit's files; never changed once written
    ROOT/<org>/<name>/refs/<ref>                 a branch or tag (`main`, `v1`): text, a 40-hex sha

A revision that is a full sha is served directly. No path outside the commit is ever served: `..`,
absolute paths and symlinks out are refused.

    python -m kvant_dev.hub_standin --root DIR --host 127.0.0.1 --port N [--token-file F]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import logging
import os
import re
import shutil
import signal
import sys
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

log = logging.getLogger("kvant.hub_standin")

LFS_MIN_SIZE = 1024 * 1024  # bigger files are LFS files, as the Hub's .gitattributes make most weights
CHUNK = 1024 * 1024
BAD_TOKEN = "Invalid credentials in Authorization header"  # the Hub's words; huggingface_hub keys on them
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # one part of a repo id, or a ref name
_SHA1 = re.compile(r"[0-9a-f]{40}")
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HubError(Exception):
    """An error answered as the Hub answers it: the status, `X-Error-Code`, `X-Error-Message`, a JSON body."""

    def __init__(self, status: int, message: str, code: str | None = None, **headers: str) -> None:
        super().__init__(message)
        self.status, self.code, self.headers = status, code, headers

    def response(self) -> web.Response:
        # Messages quote what the client sent; keep the header to one printable ASCII line.
        message = str(self).encode("ascii", "backslashreplace").decode().replace("\r", " ").replace("\n", " ")
        headers = {"X-Error-Message": message, **self.headers}
        if self.code is not None:
            headers["X-Error-Code"] = self.code
        return web.json_response({"error": message}, status=self.status, headers=headers)


@dataclass(frozen=True)
class Commit:
    repo_id: str
    sha: str
    files: Path  # the commit's folder, resolved


@dataclass(frozen=True)
class Blob:
    """One file of a commit as the Hub describes it."""

    path: str
    size: int
    lfs: bool
    digest: str  # an LFS file's sha256; any other file's git blob id

    def sibling(self) -> dict[str, object]:
        if not self.lfs:
            return {"rfilename": self.path, "size": self.size, "blobId": self.digest}
        # In git an LFS file is this pointer; the Hub's blobId and pointerSize are the pointer's.
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.digest}\nsize {self.size}\n"
        blob_id = hashlib.sha1(b"blob %d\0%s" % (len(pointer), pointer.encode())).hexdigest()
        lfs = {"sha256": self.digest, "size": self.size, "pointerSize": len(pointer)}
        return {"rfilename": self.path, "size": self.size, "blobId": blob_id, "lfs": lfs}


@dataclass(frozen=True)
class Served:
    """One answered request, kept so that a test can see what the client asked for (its Range, say)."""

    method: str
    path: str
    range: str | None
    status: int


def _inside(base: Path, path: Path) -> Path | None:
    """`path` with symlinks resolved, or None when that lands outside `base` (already resolved)."""
    resolved = path.resolve()
    return resolved if resolved.is_relative_to(base) else None


def _split_repo_id(repo_id: str) -> tuple[str, str]:
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(_SEGMENT.fullmatch(part) for part in parts):
        raise ValueError(f"{repo_id!r} is not a repo id: want <org>/<name> of letters, digits, '.', '_', '-'")
    return parts[0], parts[1]


def _is_lfs(path: str, size: int) -> bool:
    return path.endswith(".safetensors") or size > LFS_MIN_SIZE


def _file_digest(path: Path, size: int, lfs: bool) -> str:
    digest = (
        hashlib.sha256() if lfs else hashlib.sha1(b"blob %d\0" % size)
    )  # git hashes "blob <size>\0" first
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The [start, end) that one `bytes=N-` or `bytes=N-M` asks for; None without a Range header."""
    if header is None:
        return None
    match = _RANGE.fullmatch(header.strip())
    start = int(match.group(1)) if match else size
    last = int(match.group(2)) if match and match.group(2) else size - 1
    if start >= size or last < start:
        raise HubError(
            416,
            f"Range {header!r} cannot be served from a {size}-byte file; this server takes one"
            " 'bytes=N-' or 'bytes=N-M' with N < size",
            **{"Content-Range": f"bytes */{size}"},
        )
    return start, min(last + 1, size)


class HubStandin:
    """The Hub stand-in over ROOT: `start()` serves it from a background thread; the CLI uses `open()`."""

    def __init__(self, root: Path, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        self.root = root.resolve()
        self.host, self.port, self.token = host, port, token
        self.served: deque[Served] = deque(maxlen=1000)
        # Commits never change, so a file's digest is a function of (path, size, mtime): hashing a
        # multi-GB checkpoint once, not on every HEAD, changes no answer.
        self._digests: dict[tuple[Path, int, int], str] = {}
        self._drop_after: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def drop_next_download_after(self, nbytes: int) -> None:
        """Test-only: the next GET body stops after `nbytes` and the connection drops, as a network cut."""
        self._drop_after = nbytes

    # --- serving -----------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._answer])
        app.router.add_get("/api/models/{org}/{name}/revision/{revision}", self._model_info, allow_head=False)
        app.router.add_get("/{org}/{name}/resolve/{revision}/{path:.+}", self._resolve)  # and HEAD
        return app

    async def open(self) -> web.AppRunner:
        """Listens on host:port (port 0 picks a free one, then `port` holds it); returns the runner."""
        runner = web.AppRunner(self.app(), access_log=None)  # _answer logs each request instead
        await runner.setup()
        await web.TCPSite(runner, self.host, self.port).start()
        self.port = int(runner.addresses[0][1])
        return runner

    def start(self) -> HubStandin:
        """Serves from a background thread until `stop()`; returns once it listens."""
        ready = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                runner = loop.run_until_complete(self.open())
            except BaseException as error:  # handed to start()'s caller
                failed.append(error)
                loop.close()
                return
            finally:
                ready.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

        self._thread = threading.Thread(target=run, name="hub-standin", daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            raise failed[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            self._loop = self._thread = None

    def __enter__(self) -> HubStandin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @web.middleware
    async def _answer(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            self._check_token(request)
            response = await handler(request)
        except HubError as error:
            response = error.response()
        record = Served(request.method, request.path, request.headers.get("Range"), response.status)
        self.served.append(record)
        log.info(
            "method=%s path=%s range=%s status=%d", record.method, record.path, record.range, record.status
        )
        return response

    def _check_token(self, request: web.Request) -> None:
        if self.token is None:
            return
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, f"Bearer {self.token}".encode()):
            raise HubError(401, BAD_TOKEN)

    async def _model_info(self, request: web.Request) -> web.Response:
        commit = self._commit(request)
        with_blobs = request.query.get("blobs", "").lower() in ("1", "true")
        siblings = await asyncio.to_thread(self._siblings, commit, with_blobs)
        body = {"id": commit.repo_id, "modelId": commit.repo_id, "sha": commit.sha, "private": False}
        return web.json_response({**body, "gated": False, "disabled": False, "siblings": siblings})

    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        commit = self._commit(request)
        relative = request.match_info["path"]
        path = self._file(commit, relative)
        blob = await asyncio.to_thread(self._blob, path, relative)
        headers = {
            "X-Repo-Commit": commit.sha,
            "ETag": f'"{blob.digest}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if blob.lfs:
            headers |= {"X-Linked-Etag": f'"{blob.digest}"', "X-Linked-Size": str(blob.size)}
        wanted = _byte_range(request.headers.get("Range"), blob.size) if request.method == "GET" else None
        start, end = wanted or (0, blob.size)
        if wanted is not None:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{blob.size}"
        response = web.StreamResponse(status=206 if wanted else 200, headers=headers)
        response.content_length = end - start
        await response.prepare(request)
        if request.method == "GET":
            await self._send(request, response, path, start, end)
        return response

    async def _send(
        self, request: web.Request, response: web.StreamResponse, path: Path, start: int, end: int
    ) -> None:
        """Streams [start, end) of the file in chunks, never the whole file at once."""
        drop_after, self._drop_after = self._drop_after, None
        stop = end if drop_after is None else min(end, start + drop_after)
        with path.open("rb") as file:
            file.seek(start)
            position = start
            while position < stop:
                chunk = await asyncio.to_thread(file.read, min(CHUNK, stop - position))
                if not chunk:
                    break  # the file shrank under us; the short body tells the client
                await response.write(chunk)
                position += len(chunk)
        if position < end and request.transport is not None:
            request.transport.close()  # the client sees fewer bytes than Content-Length, as on a cut

    # --- the served tree ---------------------------------------------------------------------------

    def _commit(self, request: web.Request) -> Commit:
        org, name, revision = (request.match_info[key] for key in ("org", "name", "revision"))
        try:
            repo_id = "/".join(_split_repo_id(f"{org}/{name}"))
        except ValueError as error:
            raise HubError(400, str(error)) from None
        repo = _inside(self.root, self.root / org / name)
        if repo is None or not (repo / "commits").is_dir():
            raise HubError(404, f"Repository {repo_id} not found under {self.root}", "RepoNotFound")
        sha = revision if _SHA1.fullmatch(revision) else self._ref(repo, repo_id, revision)
        files = _inside(repo, repo / "commits" / sha)
        if files is None or not files.is_dir():
            raise HubError(404, f"Revision {revision!r} ({sha}) not found in {repo_id}", "RevisionNotFound")
        return Commit(repo_id, sha, files)

    def _ref(self, repo: Path, repo_id: str, ref: str) -> str:
        path = _inside(repo, repo / "refs" / ref) if _SEGMENT.fullmatch(ref) else None
        if path is None or not path.is_file():
            raise HubError(
                404,
                f"Revision {ref!r} not found in {repo_id}: no such branch, tag or commit",
                "RevisionNotFound",
            )
        sha = path.read_text().strip()
        if not _SHA1.fullmatch(sha):
            raise HubError(
                500, f"ref {ref!r} of {repo_id} ({path}) holds {sha[:60]!r}, not a 40-hex commit sha"
            )
        return sha

    def _file(self, commit: Commit, relative: str) -> Path:
        parts = relative.split("/")
        if "\0" in relative or any(part in ("", ".", "..") for part in parts):
            raise HubError(
                400, f"{relative!r} is not a path inside a repository (no '..', '.', '//' or leading '/')"
            )
        path = _inside(commit.files, commit.files.joinpath(*parts))
        if path is None or not path.is_file():
            raise HubError(
                404,
                f"Entry {relative!r} not found in {commit.repo_id} at {commit.sha}",
                "EntryNotFound",
                **{"X-Repo-Commit": commit.sha},
            )
        return path

    def _siblings(self, commit: Commit, with_blobs: bool) -> list[dict[str, object]]:
        siblings: list[dict[str, object]] = []
        for path in sorted(commit.files.rglob("*")):
            if not path.is_file() or _inside(commit.files, path) is None:
                continue  # a symlink out of the commit is not part of it
            relative = path.relative_to(commit.files).as_posix()
            siblings.append(self._blob(path, relative).sibling() if with_blobs else {"rfilename": relative})
        return siblings

    def _blob(self, path: Path, relative: str) -> Blob:
        stat = path.stat()
        lfs = _is_lfs(relative, stat.st_size)
        key = (path, stat.st_size, stat.st_mtime_ns)
        if key not in self._digests:
            self._digests[key] = _file_digest(path, stat.st_size, lfs)
        return Blob(relative, stat.st_size, lfs, self._digests[key])


def publish(root: Path, repo_id: str, files: Path, refs: Sequence[str] = ("main",)) -> str:
    """Copies the folder `files` into ROOT as a commit of `repo_id`, points `refs` at it, returns its sha.

    The sha is a sha1 over the sorted (path, sha256) pairs: publishing the same files again gives the
    same commit (left as it is), and any changed byte gives a new one.
    """
    org, name = _split_repo_id(repo_id)
    bad = [ref for ref in refs if not _SEGMENT.fullmatch(ref) or _SHA1.fullmatch(ref)]
    if bad:
        raise ValueError(
            f"ref names {bad} are not valid: letters, digits, '.', '_', '-', and not a 40-hex sha"
        )
    sources = sorted(path for path in files.rglob("*") if path.is_file())
    if not sources:
        raise ValueError(f"{files} holds no files to publish")
    repo = root / org / name
    staging = repo / "commits" / f".incoming-{uuid.uuid4().hex}"  # never served: not a 40-hex name
    pairs = sorted(
        (path.relative_to(files).as_posix(), _copy_hashing(path, staging / path.relative_to(files)))
        for path in sources
    )
    sha = hashlib.sha1("".join(f"{path}\0{digest}\n" for path, digest in pairs).encode()).hexdigest()
    if (repo / "commits" / sha).is_dir():
        shutil.rmtree(staging)  # published before; a commit is never rewritten
    else:
        staging.rename(repo / "commits" / sha)
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        temporary = repo / "refs" / f".{ref}.{uuid.uuid4().hex}"
        temporary.write_text(f"{sha}\n")
        os.replace(temporary, repo / "refs" / ref)  # a reader sees the old sha or the new one, never half
    return sha


def _copy_hashing(source: Path, target: Path) -> str:
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with source.open("rb") as reader, target.open("wb") as writer:
        while chunk := reader.read(CHUNK):
            digest.update(chunk)
            writer.write(chunk)
    return digest.hexdigest()


async def _serve(standin: HubStandin) -> None:
    runner = await standin.open()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stopping.set)
    print(f"listening on {standin.url}", flush=True)
    try:
        await stopping.wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kvant_dev.hub_standin",
        description="A stand-in for the Hugging Face Hub over a local tree.",
    )
    parser.add_argument("--root", type=Path, required=True, help="ROOT/<org>/<name>/{commits,refs}")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--token-file", type=Path, help="when set, every request needs 'Authorization: Bearer <it>'"
    )
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"--root {args.root} is not a folder")
    token = args.token_file.read_text().strip() if args.token_file else None
    if token == "":
        parser.error(f"--token-file {args.token_file} is empty; give a token or leave the flag out")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(_serve(HubStandin(args.root, args.host, args.port, token)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
