"""Fetch throughput: `kvant fetch` from a local S3 server against plain boto3 `download_file`.

    python bench/fetch/run.py [--files 4] [--file-mib 256] [--workers 8] [--reps 3] [--json FILE]

A SeaweedFS S3 server on loopback (kvant_dev.s3server) holds a synthetic checkpoint: `--files` random
`model-0000N-of-0000M.safetensors` of `--file-mib` MiB each plus a config.json, uploaded with boto3's
`upload_file` (default TransferConfig: the large objects are multipart, 8 MiB parts, so their ETags are
`<md5 of part md5s>-<parts>`; config.json is single-part, its ETag its MD5). Every side reads the same
objects from the same server (its data already in the page cache from the upload) into a fresh folder:

- kvant: the fetcher in this process (`fetch(S3Remote(...), root, FetchOptions(workers=W))`): list,
  one GET per object in W threads, then per file one read that computes the sha256 and recomputes the
  ETag (whole-object MD5, or per-part MD5s with the part size from HeadObject PartNumber=1), publish.
- peer, parallel: list, then `client.download_file(bucket, key, path)` (default TransferConfig: 8 MiB
  ranged parts, 10 threads per file) for every object from a pool of W threads, one object per thread:
  "raw" (nothing after), "+ sha256" (a sha256 of each file in the same thread right after its download:
  verification on, the headline peer), and "+ sha256 + ETag" (the same checks kvant makes).
- peer, sequential: the same `download_file` calls one after another, no hashing.
- server floor: one GET of the largest object, read in 1 MiB chunks and discarded (no disk); and the
  same for every object from W threads.

Each side runs `--reps` times, the order rotating each repetition; outputs are deleted and the page
cache's dirty pages flushed (`sync`) between sides, untimed. A side's time includes creating its boto3
client and listing the prefix. Reported: median MB/s (1 MB = 1e6 bytes) of each side, this process's
CPU seconds and the server's, and kvant's ratio to each peer. All hashes are checked against the
generated files'. The run stops repeating once `--budget-seconds` have passed; the temporary folder
and the server are removed at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import botocore.config

from kvant_dev.s3server import S3Server
from kvant_runtime.fetch.fetcher import FetchOptions, fetch
from kvant_runtime.fetch.remote import DEFAULT_PATTERNS
from kvant_runtime.fetch.s3_remote import S3Remote

BUCKET = "bench"
PREFIX = "models/synthetic"
GOAL = 0.8  # kvant >= 0.8x the peer with verification on
_WRITE_CHUNK = 16 << 20
_READ_CHUNK = 1 << 20  # the floor's GET reads, as kvant's s3_remote does
_HASH_CHUNK = 4 << 20  # the peer's sha256 reads, as kvant's fetcher does


@dataclass
class Side:
    name: str
    label: str
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)
    server_cpu_seconds: list[float] = field(default_factory=list)

    def median_mbps(self, total_bytes: int) -> float:
        return total_bytes / statistics.median(self.seconds) / 1e6


def generate(source: Path, files: int, file_mib: int) -> dict[str, str]:
    """Random shards and a config.json under `source`; returns each file's sha256 by name."""
    source.mkdir(parents=True)
    hashes: dict[str, str] = {}
    for index in range(1, files + 1):
        name = f"model-{index:05d}-of-{files:05d}.safetensors"
        digest = hashlib.sha256()
        with (source / name).open("wb") as out:
            left = file_mib << 20
            while left:
                block = os.urandom(min(left, _WRITE_CHUNK))
                digest.update(block)
                out.write(block)
                left -= len(block)
        hashes[name] = digest.hexdigest()
    config = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}).encode()
    (source / "config.json").write_bytes(config)
    hashes["config.json"] = hashlib.sha256(config).hexdigest()
    return hashes


def new_client(env: dict[str, str]) -> Any:
    """A plain boto3 client, default config (10 pooled connections), as a user would make one."""
    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_REGION"])


def create_bucket(env: dict[str, str]) -> None:
    client = new_client(env)
    for attempt in range(20):
        try:
            client.create_bucket(Bucket=BUCKET)
            return
        except Exception:  # the gateway answers before its filer is ready
            if attempt == 19:
                raise
            time.sleep(0.5)


def upload(env: dict[str, str], source: Path) -> None:
    client = new_client(env)
    with ThreadPoolExecutor(4) as pool:
        list(
            pool.map(
                lambda p: client.upload_file(str(p), BUCKET, f"{PREFIX}/{p.name}"),
                sorted(source.iterdir()),
            )
        )


def list_keys(client: Any) -> list[tuple[str, int]]:
    keys: list[tuple[str, int]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=PREFIX + "/"):
        keys.extend((str(item["Key"]), int(item["Size"])) for item in page.get("Contents", []))
    return keys


def sha256_file(path: Path, etag: str = "", part_size: int = 0) -> str:
    """The file's sha256; with `etag`, also the S3 ETag recomputed from the same read (the MD5, or for
    a multipart object the MD5 of its `part_size` parts' MD5s), raising if it differs."""
    digest = hashlib.sha256()
    part, in_part, parts = hashlib.md5(usedforsecurity=False), 0, []
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
            if not etag:
                continue
            view = memoryview(chunk)
            while view:
                room = len(view) if not part_size else part_size - in_part
                part.update(view[:room])
                in_part, view = in_part + min(room, len(view)), view[room:]
                if part_size and in_part == part_size:
                    parts.append(part.digest())
                    part, in_part = hashlib.md5(usedforsecurity=False), 0
    if etag:
        if part_size:
            parts += [part.digest()] if in_part else []
            actual = f"{hashlib.md5(b''.join(parts), usedforsecurity=False).hexdigest()}-{len(parts)}"
        else:
            actual = part.hexdigest()
        if actual != etag:
            raise RuntimeError(f"{path.name}: ETag {actual}, the server lists {etag}")
    return digest.hexdigest()


def run_kvant(env: dict[str, str], out: Path, workers: int) -> dict[str, str]:
    remote = S3Remote(f"s3://{BUCKET}/{PREFIX}", DEFAULT_PATTERNS, env["AWS_ENDPOINT_URL"], env["AWS_REGION"])
    result = fetch(remote, out, FetchOptions(staging_id="bench", workers=workers), io.StringIO())
    manifest = json.loads((out / result.path / "kvant-manifest.json").read_text())
    return {path: entry["sha256"] for path, entry in manifest["files"].items()}


def run_peer(env: dict[str, str], out: Path, workers: int, verify: str) -> dict[str, str]:
    """`verify`: "none", "sha256", or "sha256+etag" (the ETag recomputed too, the part size from
    HeadObject PartNumber=1, as kvant checks it)."""
    client = new_client(env)
    out.mkdir(parents=True)

    def one(key: str) -> tuple[str, str]:
        target = out / key.rsplit("/", 1)[-1]
        client.download_file(BUCKET, key, str(target))
        if verify == "none":
            return target.name, ""
        if verify == "sha256":
            return target.name, sha256_file(target)
        head = client.head_object(Bucket=BUCKET, Key=key, PartNumber=1)
        etag = str(head["ETag"]).strip('"')
        part_size = int(head["ContentLength"]) if "-" in etag else 0
        return target.name, sha256_file(target, etag, part_size)

    with ThreadPoolExecutor(workers) as pool:
        # The longest first, as kvant orders them.
        ordered = sorted(list_keys(client), key=lambda k: -k[1])
        return dict(pool.map(lambda k: one(k[0]), ordered))


def run_peer_sequential(env: dict[str, str], out: Path) -> dict[str, str]:
    client = new_client(env)
    out.mkdir(parents=True)
    for key, _ in list_keys(client):
        client.download_file(BUCKET, key, str(out / key.rsplit("/", 1)[-1]))
    return {}


def read_all(client: Any, key: str) -> int:
    body = client.get_object(Bucket=BUCKET, Key=key)["Body"]
    total = 0
    while chunk := body.read(_READ_CHUNK):
        total += len(chunk)
    return total


def run_floor(env: dict[str, str], workers: int, largest_only: bool) -> int:
    """Bytes read with GETs into nothing: the server and the loopback, no disk and no hashing."""
    config = botocore.config.Config(max_pool_connections=max(10, workers))
    client = boto3.client(
        "s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_REGION"], config=config
    )
    keys = sorted(list_keys(client), key=lambda k: -k[1])
    if largest_only:
        return read_all(client, keys[0][0])
    with ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(lambda k: read_all(client, k[0]), keys))


def server_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


Run = tuple[Side, Callable[[Path], object]]


def sides(env: dict[str, str], args: argparse.Namespace) -> list[Run]:
    """Each side, and what it runs into a fresh output folder."""
    runs: list[Run] = [
        (Side("kvant", "kvant fetch (size + ETag + sha256)"), lambda d: run_kvant(env, d, args.workers)),
        (
            Side("peerHashed", f"boto3 download_file x{args.workers} threads + sha256"),
            lambda d: run_peer(env, d, args.workers, verify="sha256"),
        ),
        (
            Side("peerVerified", f"boto3 download_file x{args.workers} threads + sha256 + ETag"),
            lambda d: run_peer(env, d, args.workers, verify="sha256+etag"),
        ),
        (
            Side("peerRaw", f"boto3 download_file x{args.workers} threads, no hash"),
            lambda d: run_peer(env, d, args.workers, verify="none"),
        ),
    ]
    if not args.no_sequential:
        runs.append(
            (
                Side("peerSequential", "boto3 download_file, one at a time"),
                lambda d: run_peer_sequential(env, d),
            )
        )
    return [
        *runs,
        (
            Side("floorParallel", f"server floor: GET x{args.workers}, no disk"),
            lambda d: run_floor(env, args.workers, False),
        ),
        (
            Side("floorSingle", "server floor: 1 GET of the largest, no disk"),
            lambda d: run_floor(env, 1, True),
        ),
    ]


def measure(
    runs: list[Run],
    temp: Path,
    *,
    pid: int,
    expected: dict[str, str],
    total_bytes: int,
    largest: int,
    args: argparse.Namespace,
    started: float,
) -> None:
    """Runs every side `--reps` times, rotating the order each repetition, within the budget."""
    for rep in range(args.reps):
        if rep and time.monotonic() - started > args.budget_seconds:
            print(f"budget of {args.budget_seconds:.0f} s spent: stopping after {rep} repetitions")
            break
        shift = rep % len(runs)
        for side, action in runs[shift:] + runs[:shift]:
            out = temp / f"out-{side.name}-{rep}"
            os.sync()  # the previous side's writes are not flushed on this one's clock
            cpu0, server0, t0 = time.process_time(), server_cpu_seconds(pid), time.perf_counter()
            hashes = action(out)
            seconds = time.perf_counter() - t0
            side.seconds.append(seconds)
            side.cpu_seconds.append(time.process_time() - cpu0)
            side.server_cpu_seconds.append(server_cpu_seconds(pid) - server0)
            if isinstance(hashes, dict) and any(hashes.values()) and hashes != expected:
                raise RuntimeError(f"{side.name}: hashes differ from the generated files: {hashes}")
            size = largest if side.name == "floorSingle" else total_bytes
            print(
                f"  rep {rep + 1} {side.name:15s} {seconds:6.2f} s  {size / seconds / 1e6:7.0f} MB/s",
                flush=True,
            )
            shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=4, help="number of .safetensors objects")
    parser.add_argument("--file-mib", type=int, default=256, help="size of each, MiB")
    parser.add_argument("--workers", type=int, default=8, help="kvant fetch --workers, and the peer's pool")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-sequential", action="store_true", help="skip the sequential peer")
    parser.add_argument("--budget-seconds", type=float, default=600, help="no new repetition after this")
    parser.add_argument("--workdir", type=Path, help="parent of the temporary folder (default: $TMPDIR)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args()
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # "connection pool is full" from the default config

    started = time.monotonic()
    temp = Path(tempfile.mkdtemp(prefix="kvant-bench-fetch-", dir=args.workdir))
    server = S3Server(temp / "s3", host="127.0.0.1")
    saved_env = dict(os.environ)
    try:
        print(f"generating {args.files} x {args.file_mib} MiB + config.json under {temp}", flush=True)
        expected = generate(temp / "source", args.files, args.file_mib)
        total_bytes = sum(p.stat().st_size for p in (temp / "source").iterdir())
        server.start()
        env = server.env()
        os.environ.update(env)  # credentials for S3Remote's client, as `kvant fetch` reads them
        create_bucket(env)
        upload(env, temp / "source")
        shutil.rmtree(temp / "source")
        assert server.process is not None
        pid = server.process.pid
        print(f"uploaded {total_bytes / 1e6:.0f} MB in {time.monotonic() - started:.1f} s", flush=True)

        largest = (args.file_mib << 20) if args.files else total_bytes
        runs = sides(env, args)
        measure(
            runs,
            temp,
            pid=pid,
            expected=expected,
            total_bytes=total_bytes,
            largest=largest,
            args=args,
            started=started,
        )
        results = report(runs, total_bytes, largest, args)
        print(json.dumps(results))
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        server.stop()
        shutil.rmtree(temp, ignore_errors=True)


def report(
    runs: list[Run],
    total_bytes: int,
    largest: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    sides = {side.name: side for side, _ in runs}
    mbps = {
        name: side.median_mbps(largest if name == "floorSingle" else total_bytes)
        for name, side in sides.items()
    }
    ratios = {
        "kvantOverPeerHashed": mbps["kvant"] / mbps["peerHashed"],
        "kvantOverPeerVerified": mbps["kvant"] / mbps["peerVerified"],
        "kvantOverPeerRaw": mbps["kvant"] / mbps["peerRaw"],
        "kvantOverFloorParallel": mbps["kvant"] / mbps["floorParallel"],
    }
    if "peerSequential" in mbps:
        ratios["kvantOverPeerSequential"] = mbps["kvant"] / mbps["peerSequential"]
    print(
        f"\n{args.files} x {args.file_mib} MiB + config.json ({total_bytes / 1e6:.0f} MB), "
        f"{args.workers} workers, {os.cpu_count()} cores, median of {len(sides['kvant'].seconds)}"
    )
    print("| side | MB/s | s | this process CPU s | server CPU s | kvant ÷ side |")
    print("|---|---|---|---|---|---|")
    for name, side in sides.items():
        ratio = mbps["kvant"] / mbps[name]
        print(
            f"| {side.label} | {mbps[name]:.0f} | {statistics.median(side.seconds):.2f} | "
            f"{statistics.median(side.cpu_seconds):.2f} | {statistics.median(side.server_cpu_seconds):.2f} | "
            f"{ratio:.2f} |"
        )
    headline = ratios["kvantOverPeerHashed"]
    verdict = "met" if headline >= GOAL else "NOT met"
    print(f"kvant ÷ peer with sha256 = {headline:.2f} (goal ≥ {GOAL}: {verdict})")
    return {
        "bytes": total_bytes,
        "files": args.files + 1,
        "workers": args.workers,
        "cores": os.cpu_count(),
        "reps": len(sides["kvant"].seconds),
        "mbps": {k: round(v, 1) for k, v in mbps.items()},
        "seconds": {k: [round(s, 3) for s in side.seconds] for k, side in sides.items()},
        "cpuSeconds": {k: round(statistics.median(side.cpu_seconds), 2) for k, side in sides.items()},
        "serverCpuSeconds": {
            k: round(statistics.median(side.server_cpu_seconds), 2) for k, side in sides.items()
        },
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "goalMet": headline >= GOAL,
    }


if __name__ == "__main__":
    main()
