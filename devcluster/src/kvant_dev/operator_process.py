"""`kvant run` as a local process beside a local cluster, as e2e tests and benches run the operator:
started, SIGKILLed (as an OOM kill or a lost node would take it), started again; its memory read.

The chart runs the same command in a pod (e2e's helm tests do); here it runs on the host so a test
can kill it at a moment of its choosing and read its log and /proc."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kvant_dev.cluster import LocalCluster
from kvant_dev.model_stores import ModelStores
from kvant_dev.netutil import free_port, http_ok, wait_until
from kvant_dev.process import ManagedProcess


class OperatorProcess:
    """The operator against `cluster`, with the cluster's model stores as its default S3 and Hub
    endpoints (as `make demo` installs the chart), file:// sources allowed under `file_sources`,
    and fetch keys from the `credentials_secret` Secret of a model's namespace where one exists."""

    def __init__(
        self,
        cluster: LocalCluster,
        workdir: Path,
        stores: ModelStores,
        *,
        file_sources: str,
        credentials_secret: str,
    ) -> None:
        self.cluster, self.workdir, self.stores = cluster, workdir, stores
        self.file_sources, self.credentials_secret = file_sources, credentials_secret
        self.process: ManagedProcess | None = None
        self.metrics_port = 0
        self.starts = 0

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the operator is not running")
        return self.process.pid

    def start(self) -> None:
        self.metrics_port, health_port = free_port(), free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "KVANT_BUSY_INTERVAL": "1",
            "KVANT_IDLE_INTERVAL": "10",
            "KVANT_FILE_SOURCE_PREFIXES": self.file_sources,
            "KVANT_S3_ENDPOINT": self.stores.s3.url,
            "KVANT_S3_REGION": self.stores.s3.env()["AWS_REGION"],
            "KVANT_HF_ENDPOINT": self.stores.hub_url,
            "KVANT_SOURCE_CREDENTIALS_SECRET": self.credentials_secret,
        }
        argv = [sys.executable, "-m", "kvant_cli.main", "run"]
        argv += ["--liveness", f"http://127.0.0.1:{health_port}/healthz"]
        argv += ["--metrics-host", "127.0.0.1", "--metrics-port", str(self.metrics_port)]
        self.starts += 1
        self.process = ManagedProcess("operator", argv, self.workdir / f"operator.{self.starts}.log", env=env)
        wait_until(
            lambda: http_ok(f"http://127.0.0.1:{health_port}/healthz"), 60, "operator liveness", self.log_tail
        )

    def kill(self) -> None:
        """SIGKILL, as a crashed node or an OOM kill would."""
        if self.process is not None:
            self.process.popen.kill()
            self.process.popen.wait()
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace_seconds=10)
            self.process = None

    def rss_mib(self) -> float:
        """The operator process's resident memory now (VmRSS), in MiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def log_tail(self, lines: int = 60) -> str:
        return self.process.log_tail(lines) if self.process else "(operator not running)"
