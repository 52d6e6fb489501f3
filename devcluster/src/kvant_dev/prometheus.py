"""A real Prometheus (Debian's binary) scraping the local cluster, with a tiny query client."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kvant_contracts.kube_object import Obj
from kvant_dev.netutil import free_port, http_ok, wait_until
from kvant_dev.process import ManagedProcess

SCRAPE_ANNOTATION = "prometheus.io/scrape"


def static_job(name: str, targets: list[str], metrics_path: str = "/metrics") -> Obj:
    return {"job_name": name, "metrics_path": metrics_path, "static_configs": [{"targets": targets}]}


def pod_discovery_job(targets_file: Path) -> Obj:
    """Scrapes the pods the node agent lists in `targets_file` (file-based discovery).

    Debian's Prometheus is built without Kubernetes discovery, so the node agent, which knows every
    pod it runs, writes the targets: ports named `*metrics` of pods annotated prometheus.io/scrape=true,
    labelled with namespace, pod, container and the pod's own labels.
    """
    return {
        "job_name": "kubernetes-pods",
        "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
    }


@dataclass
class Prometheus:
    binary: Path
    workdir: Path
    scrape_configs: list[Obj]
    scrape_interval: str = "1s"
    tied_to_parent: bool = True
    host: str = "127.0.0.1"  # a cluster's Prometheus listens on its host link, reachable from pods
    port: int = 0
    process: ManagedProcess | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port(self.host)
        config = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval},
            "scrape_configs": self.scrape_configs,
        }
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config))
        argv = [
            str(self.binary),
            f"--config.file={config_path}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address={self.host}:{self.port}",
            "--web.enable-lifecycle",
        ]
        self.process = ManagedProcess(
            "prometheus", argv, self.workdir / "prometheus.log", tied_to_parent=self.tied_to_parent
        )
        wait_until(
            lambda: http_ok(f"{self.url}/-/ready"),
            60,
            "prometheus /-/ready",
            lambda: self.process.log_tail() if self.process else "",
        )

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace_seconds=10.0)
            self.process = None

    def query(self, expr: str) -> list[Obj]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus query {expr!r} failed: {body}")
        result: list[Obj] = body["data"]["result"]
        return result
