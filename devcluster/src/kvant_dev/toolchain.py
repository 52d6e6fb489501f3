"""Where the pinned cluster binaries live once hack/toolchain.sh has built them."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_VERSIONS_FILE = Path(__file__).with_name("versions.env")


def cache_dir() -> Path:
    return Path(os.environ.get("KVANT_CACHE", Path.home() / ".cache" / "kvant"))


def pinned_versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    for line in _VERSIONS_FILE.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            versions[key.strip()] = value.strip()
    return versions


KSTATUS_SOURCE = Path(__file__).resolve().parents[3] / "hack" / "kstatus"


def kstatus_source_key() -> str:
    """The helper's cache key, as hack/toolchain.sh computes it: `sha256sum FILES | sha256sum`."""
    listing = "".join(
        f"{hashlib.sha256((KSTATUS_SOURCE / name).read_bytes()).hexdigest()}  {name}\n"
        for name in ("go.mod", "go.sum", "main.go")
    )
    return hashlib.sha256(listing.encode()).hexdigest()[:8]


# The local cluster's SGLang engine "image" (an environment of its own; see hack/engine-image.sh).
ENGINE_IMAGE_SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "engine-image.sh"
ENGINE_ENVIRONMENT = "sglang-engine"  # its name in nodeagent/images.yaml


def built_environment(name: str) -> Path | None:
    """The folder of an image's environment (images.yaml `environment`) once built, else None; never
    builds one (`make tools` does)."""
    if name != ENGINE_ENVIRONMENT:
        return None
    done = subprocess.run(
        ["bash", str(ENGINE_IMAGE_SCRIPT), "--locate"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


def go_module_version(binary: Path, module: str) -> str:
    """The version of `module` that a Go binary's build info records, as `go version -m` shows it
    (read from the binary's bytes, so no Go toolchain is needed)."""
    line = re.search(rb"\n(?:mod|dep)\t" + re.escape(module.encode()) + rb"\t(\S+)\t", binary.read_bytes())
    return line.group(1).decode() if line else "unknown"


class MissingBinaryError(RuntimeError):
    pass


@dataclass(frozen=True)
class Toolchain:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kube_proxy: Path
    coredns: Path
    helm: Path
    prometheus: Path
    prometheus_adapter: Path
    nft: Path
    kubectl: Path
    kstatus: Path

    @classmethod
    def locate(cls) -> Toolchain:
        v = pinned_versions()
        bin_dir = cache_dir() / "bin"
        kube = bin_dir / f"kube-{v['KUBE_VERSION']}"
        venv_kubectl = Path(sys.executable).parent / "kubectl"
        toolchain = cls(
            etcd=bin_dir / f"etcd-{v['ETCD_VERSION']}" / "etcd",
            kube_apiserver=kube / "kube-apiserver",
            kube_controller_manager=kube / "kube-controller-manager",
            kube_scheduler=kube / "kube-scheduler",
            kube_proxy=kube / "kube-proxy",
            coredns=bin_dir / f"coredns-{v['COREDNS_VERSION']}" / "coredns",
            helm=bin_dir / f"helm-{v['HELM_VERSION']}" / "helm",
            prometheus=bin_dir / "prometheus-deb" / "usr" / "bin" / "prometheus",
            prometheus_adapter=bin_dir / f"prometheus-adapter-{v['PROMETHEUS_ADAPTER_VERSION']}" / "adapter",
            nft=bin_dir / "nftables-deb" / "usr" / "sbin" / "nft",
            kubectl=venv_kubectl if venv_kubectl.exists() else Path(shutil.which("kubectl") or venv_kubectl),
            kstatus=bin_dir / f"kstatus-{v['CLI_UTILS_VERSION']}-{kstatus_source_key()}" / "kstatus",
        )
        missing = [str(p) for p in vars(toolchain).values() if not Path(p).is_file()]
        if missing:
            raise MissingBinaryError(
                "local cluster binaries are missing: "
                + ", ".join(missing)
                + "; run `bash hack/toolchain.sh` (or `make tools`)"
            )
        return toolchain

    def nft_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment in which `nft` (unpacked, not installed) is on PATH and finds its libraries."""
        env = dict(os.environ if base is None else base)
        root = self.nft.parent.parent.parent
        env["PATH"] = f"{self.nft.parent}:{env.get('PATH', '/usr/bin:/bin')}"
        env["LD_LIBRARY_PATH"] = str(root / "usr" / "lib" / "x86_64-linux-gnu")
        return env

    def versions(self) -> dict[str, str]:
        """What each binary says of its own version (the first line of its output)."""
        commands = {
            "etcd": [str(self.etcd), "--version"],
            "kube-apiserver": [str(self.kube_apiserver), "--version"],
            "kube-controller-manager": [str(self.kube_controller_manager), "--version"],
            "kube-scheduler": [str(self.kube_scheduler), "--version"],
            "kube-proxy": [str(self.kube_proxy), "--version"],
            "coredns": [str(self.coredns), "-version"],
            "kubectl": [str(self.kubectl), "version", "--client"],
            "helm": [str(self.helm), "version", "--short"],
            "prometheus": [str(self.prometheus), "--version"],
            "nft": [str(self.nft), "--version"],
        }
        out = {}
        for name, argv in commands.items():
            result = subprocess.run(argv, capture_output=True, text=True, check=False, env=self.nft_env())
            out[name] = (result.stdout or result.stderr).strip().splitlines()[0]
        # prometheus-adapter has no --version flag: its Go build info records the module's version.
        adapter = go_module_version(self.prometheus_adapter, "sigs.k8s.io/prometheus-adapter")
        out["prometheus-adapter"] = f"prometheus-adapter {adapter} (Go build info)"
        return out
