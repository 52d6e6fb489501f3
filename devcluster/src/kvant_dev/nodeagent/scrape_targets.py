"""Prometheus file_sd targets for the pods this agent runs (Debian's Prometheus has no Kubernetes SD)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from kvant_dev.nodeagent.podrunner import PodRunner

SCRAPE_ANNOTATION = "prometheus.io/scrape"
_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")


def targets(runners: list[PodRunner]) -> list[dict[str, Any]]:
    groups = []
    for runner in sorted(runners, key=lambda r: (r.namespace, r.name)):
        meta = runner.pod["metadata"]
        if (meta.get("annotations") or {}).get(SCRAPE_ANNOTATION) != "true":
            continue
        pod_labels = {_LABEL_CHARS.sub("_", k): v for k, v in (meta.get("labels") or {}).items()}
        for container in runner.pod["spec"]["containers"]:
            for port in container.get("ports", []):
                if str(port.get("name", "")).endswith("metrics"):
                    labels = {
                        **pod_labels,
                        "namespace": runner.namespace,
                        "pod": runner.name,
                        "container": container["name"],
                    }
                    groups.append({"targets": [f"{runner.pod_ip}:{port['containerPort']}"], "labels": labels})
    return groups


def write_targets(path: Path, runners: list[PodRunner]) -> None:
    content = json.dumps(targets(runners), indent=1, sort_keys=True)
    if path.exists() and path.read_text() == content:
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(content)
    os.replace(tmp, path)  # Prometheus must never read a half-written file
