"""s3:// sources through boto3: a prefix listed once, each object fetched by byte range and resumed.

Kvant writes no S3 HTTP client. An object downloads into `<path>.part` with `get_object`; a restarted
pod hashes what the part holds and asks for the rest (`Range: bytes=N-`) with `If-Match` on the ETag
it listed, so an object replaced since is fetched again from its start rather than spliced.

Verification: the size, and the ETag. A single-part ETag is the object's MD5. A multipart ETag
(`<hex>-<parts>`) is the MD5 of the parts' MD5s, so it can be checked once the part size is known:
`HeadObject` with `PartNumber=1` gives it (AWS and SeaweedFS both answer). Where a server does not,
the file rests on its size, and the sha256 Kvant computes and records in the manifest is what later
readers verify against.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import boto3
import botocore.config
from botocore import exceptions as boto_errors

from kvant_runtime.fetch.remote import (
    Check,
    FetchError,
    RemoteFile,
    Snapshot,
    Translated,
    safe_relative,
    selected,
)

_ETAG = re.compile(r"^(?P<md5>[0-9a-f]{32})(-(?P<parts>[0-9]+))?$")
_CHUNK = 1 << 20
_DENIED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden")


class S3Remote:
    def __init__(self, uri: str, patterns: tuple[str, ...], endpoint: str | None, region: str | None) -> None:
        self.uri, self.patterns = uri, patterns
        self.bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        config = botocore.config.Config(
            retries={"max_attempts": 5, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
            max_pool_connections=32,
        )
        # Credentials come from the environment (AWS_ACCESS_KEY_ID, ...), as boto3 reads them.
        self.client: Any = boto3.client(
            "s3", endpoint_url=endpoint or None, region_name=region, config=config
        )
        self.endpoint = endpoint or ""

    def resolve(self) -> Snapshot:
        objects: dict[str, dict[str, Any]] = {}
        with Translated(f"{self.uri}: listing", _translate):
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            ):
                for item in page.get("Contents", []):
                    key = str(item["Key"])
                    if not key.endswith("/"):
                        objects[key[len(self.prefix) :]] = item
        files = []
        for path in selected(sorted(objects), self.patterns):
            item = objects[safe_relative(path, self.uri)]
            etag = str(item.get("ETag", "")).strip('"')
            files.append(
                RemoteFile(
                    path=path,
                    size=int(item["Size"]),
                    etag=etag or None,
                    part_size=self._part_size(path, etag),
                )
            )
        if not files:
            raise FetchError(
                "not-found",
                f"{self.uri}: no object under the prefix matches {list(self.patterns)} "
                f"({len(objects)} objects listed); check the URI or spec.source.allowPatterns",
            )
        # The listing (names, sizes, ETags) is the revision: the same objects give the same folder.
        listing = "".join(f"{f.path}\0{f.size}\0{f.etag}\n" for f in files)
        revision = hashlib.sha256(f"{self.endpoint}\n{self.uri}\n{listing}".encode()).hexdigest()
        location = hashlib.sha256(f"{self.endpoint}\n{self.uri}".encode()).hexdigest()[:16]
        return Snapshot(self.uri, revision, f"s3/{self.bucket}/{location}/{revision[:16]}", tuple(files))

    def _part_size(self, path: str, etag: str) -> int | None:
        match = _ETAG.match(etag)
        if match is None or match["parts"] is None:
            return None
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self.prefix + path, PartNumber=1)
        except (boto_errors.ClientError, boto_errors.BotoCoreError):
            return None  # a server without part lookups: the size and the recorded sha256 remain
        return int(head["ContentLength"])

    def checks(self, file: RemoteFile) -> list[Check]:
        match = _ETAG.match(file.etag or "")
        if match is None:
            return []
        if match["parts"] is None:
            return [ETagCheck(file.etag or "", None)]
        return [ETagCheck(file.etag or "", file.part_size)] if file.part_size else []

    def fill(self, file: RemoteFile, part: Path, start: int) -> None:
        key = self.prefix + file.path
        extra: dict[str, str] = {"IfMatch": f'"{file.etag}"'} if file.etag else {}
        with Translated(f"{self.uri}: downloading {file.path}", _translate):
            try:
                response = self.client.get_object(
                    Bucket=self.bucket, Key=key, Range=f"bytes={start}-", **extra
                )
            except boto_errors.ClientError as error:
                if _code(error) != "PreconditionFailed":
                    raise
                raise FetchError(
                    "integrity",
                    f"{self.uri}: {file.path} changed while it was being fetched (its ETag is no longer "
                    f"{file.etag}); fetching again lists the new version",
                    retryable=True,
                ) from None
            body = response["Body"]
            with part.open("ab") as out:
                while chunk := body.read(_CHUNK):
                    out.write(chunk)


class ETagCheck:
    """An S3 ETag recomputed from the bytes: the MD5, or for `part_size` parts the MD5 of their MD5s."""

    def __init__(self, etag: str, part_size: int | None) -> None:
        self.etag, self.part_size = etag, part_size
        self.part = hashlib.md5(usedforsecurity=False)
        self.in_part = 0
        self.part_digests: list[bytes] = []

    def update(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            room = len(view) if self.part_size is None else self.part_size - self.in_part
            self.part.update(view[:room])
            self.in_part += min(room, len(view))
            view = view[room:]
            if self.part_size is not None and self.in_part == self.part_size:
                self.part_digests.append(self.part.digest())
                self.part, self.in_part = hashlib.md5(usedforsecurity=False), 0

    def problem(self) -> str:
        if self.part_size is None:
            actual = self.part.hexdigest()
        else:
            digests = self.part_digests + ([self.part.digest()] if self.in_part else [])
            actual = f"{hashlib.md5(b''.join(digests), usedforsecurity=False).hexdigest()}-{len(digests)}"
        return "" if actual == self.etag else f"ETag {actual} (md5), the remote lists {self.etag}"


def _translate(error: BaseException, doing: str) -> FetchError | None:
    """boto's errors, as a FetchError that names the cause."""
    if isinstance(error, boto_errors.NoCredentialsError):
        return FetchError("auth", f"{doing}: no credentials; set AWS keys in spec.source.credentialsSecret")
    if isinstance(error, boto_errors.ClientError):
        code = _code(error)
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _DENIED or status in (401, 403):
            return FetchError(
                "auth",
                f"{doing}: access denied ({code}); check the AWS keys in spec.source.credentialsSecret",
            )
        if code in ("NoSuchBucket", "NoSuchKey", "404", "NotFound"):
            return FetchError("not-found", f"{doing}: {code}: the bucket or object does not exist")
        return FetchError("unavailable", f"{doing}: {code}: {error}", retryable=True)
    if isinstance(error, boto_errors.BotoCoreError | OSError):
        return FetchError("unavailable", f"{doing}: {type(error).__name__}: {error}", retryable=True)
    return None


def _code(error: boto_errors.ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))
