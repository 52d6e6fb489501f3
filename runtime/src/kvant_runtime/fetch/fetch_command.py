"""`kvant fetch URI ROOT`: what the operator's fetch Job runs, and what a person runs by hand."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from kvant_runtime.fetch.fetcher import FetchOptions, fetch
from kvant_runtime.fetch.remote import DEFAULT_PATTERNS, FetchError, Remote

# The fetch Job fails at once on EXIT_FAILED (a bad token, a missing object, corrupt bytes after
# retries: another pod would fail the same way) and restarts the pod on EXIT_RETRYABLE (the server
# was unreachable), which then resumes from the partial files.
EXIT_FAILED = 2
EXIT_RETRYABLE = 3

_DESCRIPTION = f"""\
Fetch a model source into ROOT/<folder>, where <folder> is named by the resolved revision (hf/ORG/NAME/
<commit> or s3/BUCKET/<id>/<listing digest>). Files download in parallel, resume after a restart, are
verified (Hub LFS sha256 or git blob id; S3 size and single-part MD5) and are published together: the
folder counts only once its kvant-manifest.json exists. Progress and the result are JSON lines on stdout.
Credentials come from the environment: HF_TOKEN (or --hf-token-file), AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY. Default patterns: {" ".join(DEFAULT_PATTERNS)}.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "fetch",
        help="fetch an hf:// or s3:// source (parallel, resumable, verified)",
        description=_DESCRIPTION,
    )
    parser.add_argument("uri", metavar="URI", help="hf://ORG/NAME or s3://BUCKET/PREFIX")
    parser.add_argument(
        "root", type=Path, metavar="ROOT", help="the sources root the folder is published under"
    )
    parser.add_argument("--revision", help="hf://: a branch, tag or commit (default main)")
    parser.add_argument("--hf-endpoint", default=os.environ.get("HF_ENDPOINT"), help="default: $HF_ENDPOINT")
    parser.add_argument("--hf-token-file", type=Path, help="a file holding the Hub token (else $HF_TOKEN)")
    parser.add_argument(
        "--s3-endpoint", default=os.environ.get("AWS_ENDPOINT_URL"), help="default: $AWS_ENDPOINT_URL"
    )
    parser.add_argument("--s3-region", default=os.environ.get("AWS_REGION"))
    parser.add_argument("--allow-pattern", action="append", default=[], metavar="GLOB", help="repeatable")
    parser.add_argument("--workers", type=int, default=8, help="files fetched at once (1-64)")
    parser.add_argument("--staging-id", default="local", help="names this request's staging folder")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        remote = _remote(args)
        if not 1 <= args.workers <= 64:
            raise FetchError("input", f"--workers {args.workers}: use 1 to 64")
        if not args.staging_id.replace("-", "").isalnum():
            raise FetchError("input", f"--staging-id {args.staging_id!r}: use letters, digits and '-'")
        args.root.mkdir(parents=True, exist_ok=True)
        result = fetch(
            remote, args.root, FetchOptions(staging_id=args.staging_id, workers=args.workers), sys.stdout
        )
    except FetchError as error:
        print(json.dumps({"event": "error", "kind": error.kind, "message": str(error)}), flush=True)
        print(f"kvant fetch: {error}", file=sys.stderr)
        return EXIT_RETRYABLE if error.retryable else EXIT_FAILED
    except OSError as error:  # the sources volume: a full disk mid-file, permissions
        kind = "disk" if error.errno == 28 else "io"
        print(json.dumps({"event": "error", "kind": kind, "message": str(error)}), flush=True)
        print(f"kvant fetch: {args.uri}: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(result.fields()), flush=True)
    return 0


def _remote(args: argparse.Namespace) -> Remote:
    patterns = tuple(args.allow_pattern) or DEFAULT_PATTERNS
    uri: str = args.uri
    if uri.startswith("hf://"):
        from kvant_runtime.fetch.hf_remote import HfRemote  # noqa: PLC0415 - only the scheme in use loads

        token = args.hf_token_file.read_text().strip() if args.hf_token_file else os.environ.get("HF_TOKEN")
        return HfRemote(uri, args.revision, patterns, args.hf_endpoint, token)
    if uri.startswith("s3://"):
        from kvant_runtime.fetch.s3_remote import S3Remote  # noqa: PLC0415

        if args.revision:
            raise FetchError(
                "input", f"{uri}: --revision applies to hf:// only (an s3:// source is its listing)"
            )
        return S3Remote(uri, patterns, args.s3_endpoint, args.s3_region)
    raise FetchError("input", f"{uri}: kvant fetch takes hf://ORG/NAME or s3://BUCKET/PREFIX")
