"""A real S3 server for the local cluster: SeaweedFS (`weed server -s3`), built by hack/toolchain.sh.

It listens on one address only (loopback for tests on the host, or the cluster's host link so pods
reach it) and keeps every byte under `workdir`: its data, its sockets, its logs. SeaweedFS defaults
that would reach elsewhere are turned off explicitly: telemetry to seaweedfs.com, and `-ip`, whose
default is an address outside this machine. It does not exit promptly on SIGTERM, so stop() gives
it a short grace period and then SIGKILLs the group.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field
from pathlib import Path

from kvant_dev.netutil import free_port, wait_until
from kvant_dev.process import ManagedProcess
from kvant_dev.toolchain import cache_dir, pinned_versions

# The local cluster's S3 identity. Not a secret: it guards a test server that only this machine can
# reach, and `kvant dev env` prints it as AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
ACCESS_KEY = "kvant-local"
SECRET_KEY = "kvant-local-secret"
REGION = "us-east-1"


def weed_binary() -> Path:
    return cache_dir() / "bin" / f"seaweedfs-{pinned_versions()['SEAWEEDFS_VERSION']}" / "weed"


@dataclass
class S3Server:
    workdir: Path
    host: str = "127.0.0.1"
    port: int = 0
    tied_to_parent: bool = True
    process: ManagedProcess | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        """What boto3 (and `kvant fetch`) need to reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
        }

    def start(self) -> None:
        binary = weed_binary()
        if not binary.is_file():
            raise FileNotFoundError(f"{binary} is missing; run `bash hack/toolchain.sh` (or `make tools`)")
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port(self.host)
        identities = {
            "identities": [
                {
                    "name": "kvant",
                    "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }
        config = self.workdir / "s3.json"
        config.write_text(json.dumps(identities))
        # Every port explicit: SeaweedFS would otherwise put gRPC at port + 10000, unchecked.
        ports = {
            name: free_port(self.host)
            for name in ("master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3.grpc")
        }
        argv = [
            str(binary),
            "server",
            f"-dir={data}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=1024",
            "-volume.max=0",
            "-volume.preStopSeconds=0",
            f"-master.port={ports['master']}",
            f"-master.port.grpc={ports['master.grpc']}",
            f"-volume.port={ports['volume']}",
            f"-volume.port.grpc={ports['volume.grpc']}",
            f"-filer.port={ports['filer']}",
            f"-filer.port.grpc={ports['filer.grpc']}",
            f"-filer.localSocket={self.workdir / 'filer.sock'}",
            "-s3",
            f"-s3.port={self.port}",
            f"-s3.port.grpc={ports['s3.grpc']}",
            f"-s3.config={config}",
            f"-s3.localSocket={self.workdir / 's3.sock'}",
        ]
        self.process = ManagedProcess(
            "seaweedfs", argv, self.workdir / "weed.log", cwd=self.workdir, tied_to_parent=self.tied_to_parent
        )
        wait_until(
            self._ready, 90, "SeaweedFS's S3 gateway", lambda: self.process.log_tail() if self.process else ""
        )

    def _ready(self) -> bool:
        if self.process is not None and not self.process.running():
            raise RuntimeError(f"SeaweedFS exited during start-up:\n{self.process.log_tail(40)}")
        # The gateway answers an unsigned ListBuckets with 403 once it is up: reaching it is enough
        # here, and the first signed call (tests, `kvant dev up`) then retries through boto3.
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as sock:
                sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
                return sock.recv(12).startswith(b"HTTP/1.")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace_seconds=3.0)
            self.process = None
