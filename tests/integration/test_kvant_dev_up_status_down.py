"""`kvant dev up|status|env|down`: the demo's cluster comes up detached, answers, and goes away clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import boto3
import huggingface_hub
import pytest
import yaml
from huggingface_hub.errors import RepositoryNotFoundError

from kvant_dev.network import Addresses
from kvant_dev.process import is_alive

pytestmark = pytest.mark.cluster


def _kvant(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvant_cli.main", "dev", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_dev_cluster_lifecycle(tmp_path: Path) -> None:
    env = {**os.environ, "KVANT_DEV_DIR": str(tmp_path / "dev")}
    up = _kvant("up", "--prometheus", "--gpus-per-node", "4", env=env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((tmp_path / "dev" / "state.json").read_text())
        assert set(state["processes"]) >= {
            "etcd", "kube-apiserver", "kube-proxy", "coredns", "node-agent", "node-netns", "prometheus",
            "seaweedfs", "hub-standin",
        }  # fmt: skip
        link = _own_link(state["kubeconfig"])
        assert link in _ip("link") and f"dev {link}" in _ip("route")
        assert all(is_alive(pid) for pid in state["processes"].values())

        status = _kvant("status", env=env)
        assert status.returncode == 0 and "kvant-gpu-0" in status.stdout and "Ready" in status.stdout
        exports = _kvant("env", env=env).stdout
        assert f"export KUBECONFIG={state['kubeconfig']}" in exports
        stores = dict(
            line.removeprefix("export ").split("=", 1)
            for line in exports.splitlines()
            if "_ENDPOINT" in line or line.startswith("export AWS_")
        )
        assert set(stores) == {
            "AWS_ENDPOINT_URL",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_REGION",
            "HF_ENDPOINT",
        }
        # Both listen on the cluster's host link (where pods reach them), and answer their clients.
        assert stores["AWS_ENDPOINT_URL"].startswith(f"http://{_host_ip(state['kubeconfig'])}:")
        assert stores["HF_ENDPOINT"].startswith(f"http://{_host_ip(state['kubeconfig'])}:")
        s3 = boto3.client(
            "s3",
            endpoint_url=stores["AWS_ENDPOINT_URL"],
            aws_access_key_id=stores["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=stores["AWS_SECRET_ACCESS_KEY"],
            region_name=stores["AWS_REGION"],
        )
        assert "Buckets" in s3.list_buckets()
        with pytest.raises(RepositoryNotFoundError):
            huggingface_hub.HfApi(endpoint=stores["HF_ENDPOINT"], token=False).model_info(
                "no/such-model", revision="main"
            )
        with urllib.request.urlopen(f"{state['prometheus']}/-/ready", timeout=5) as response:
            assert response.status == 200
    finally:
        down = _kvant("down", env=env)
    assert down.returncode == 0
    assert not any(is_alive(pid) for pid in state["processes"].values())
    assert not (tmp_path / "dev").exists()
    # Its network went with it: no link, no route through it (other clusters may still be up).
    assert f" {link}:" not in _ip("link") and f"dev {link}" not in _ip("route")


def _ip(what: str) -> str:
    return subprocess.run(["ip", "-o", what, "show"], capture_output=True, text=True, check=True).stdout


def _host_ip(kubeconfig: str) -> str:
    """The host end of the cluster's link, where its apiserver listens (and its model stores)."""
    server = yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    return str(server.removeprefix("https://").rsplit(":", 1)[0])


def _own_link(kubeconfig: str) -> str:
    """The host veth of the cluster whose apiserver the kubeconfig names: it listens on the host end
    of its slot's link, 198.19.255.(4 x slot + 1)."""
    return Addresses((int(_host_ip(kubeconfig).rsplit(".", 1)[1]) - 1) // 4).host_link
