"""The model stores tests fetch from: a real SeaweedFS S3 server and the Hub stand-in, and how to
fill them. Shared by the fetch tests (on loopback) and the e2e tests (on the cluster's host link)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError, EndpointConnectionError

from kvant_dev.s3server import S3Server


def s3_client(server: S3Server) -> Any:
    env = server.env()
    return boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_REGION"],
    )


def create_bucket(server: S3Server, bucket: str) -> Any:
    """The bucket, created once the server accepts writes (its volume server registers a moment
    after the gateway answers)."""
    client = s3_client(server)
    deadline = time.monotonic() + 60
    while True:
        try:
            client.create_bucket(Bucket=bucket)
            return client
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in (
                "BucketAlreadyExists",
                "BucketAlreadyOwnedByYou",
            ):
                return client
            if time.monotonic() > deadline:
                raise
        except EndpointConnectionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def upload_folder(client: Any, folder: Path, bucket: str, prefix: str) -> list[str]:
    """Uploads every file below `folder` (boto3's own transfer: multipart above 8 MiB)."""
    keys = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key = f"{prefix.strip('/')}/{path.relative_to(folder).as_posix()}"
        client.upload_file(str(path), bucket, key)
        keys.append(key)
    return keys
