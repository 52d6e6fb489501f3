"""The local cluster's model stores: a real S3 server (SeaweedFS) and the Hugging Face Hub stand-in.

Both listen on the cluster's host link, an address in the cluster's own test range that this machine
and the cluster's pods both reach, and keep their data under the cluster's folder. `env()` is what a
client needs (boto3's and huggingface_hub's own variables); `kvant dev env` prints it.
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kvant_dev.netutil import free_port, wait_until
from kvant_dev.process import ManagedProcess
from kvant_dev.s3server import S3Server


@dataclass
class ModelStores:
    workdir: Path
    host: str
    tied_to_parent: bool = True
    hub_token: str | None = None  # None: the Hub stand-in serves without a token, as public repos
    s3: S3Server = field(init=False)
    hub: ManagedProcess | None = field(default=None, init=False, repr=False)
    hub_port: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.s3 = S3Server(self.workdir / "s3", host=self.host, tied_to_parent=self.tied_to_parent)

    @property
    def hub_root(self) -> Path:
        """Where repositories are published for the stand-in (`kvant_dev.hub_standin.publish`)."""
        return self.workdir / "hub"

    @property
    def hub_url(self) -> str:
        return f"http://{self.host}:{self.hub_port}"

    def env(self) -> dict[str, str]:
        return {**self.s3.env(), "HF_ENDPOINT": self.hub_url}

    def start(self) -> None:
        self.s3.start()
        self.hub_root.mkdir(parents=True, exist_ok=True)
        self.hub_port = free_port(self.host)
        argv = [sys.executable, "-m", "kvant_dev.hub_standin", "--root", str(self.hub_root)]
        argv += ["--host", self.host, "--port", str(self.hub_port)]
        if self.hub_token is not None:
            token_file = self.workdir / "hub-token"
            token_file.write_text(self.hub_token)
            token_file.chmod(0o600)
            argv += ["--token-file", str(token_file)]
        self.hub = ManagedProcess(
            "hub-standin", argv, self.workdir / "hub-standin.log", tied_to_parent=self.tied_to_parent
        )
        wait_until(
            self._hub_listening, 30, "the Hub stand-in", lambda: self.hub.log_tail() if self.hub else ""
        )

    def _hub_listening(self) -> bool:
        if self.hub is not None and not self.hub.running():
            raise RuntimeError(f"the Hub stand-in exited during start-up:\n{self.hub.log_tail(40)}")
        try:
            with socket.create_connection((self.host, self.hub_port), timeout=1):
                return True
        except OSError:
            return False

    def processes(self) -> dict[str, ManagedProcess]:
        found = {"hub-standin": self.hub} if self.hub else {}
        if self.s3.process is not None:
            found["seaweedfs"] = self.s3.process
        return found

    def stop(self) -> None:
        if self.hub is not None:
            self.hub.stop(grace_seconds=5.0)
            self.hub = None
        self.s3.stop()
