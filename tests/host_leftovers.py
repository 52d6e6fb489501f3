"""What the suite must never leave on the host: new entries in its system folders or in the home
folder and its ~/.cache, or network links and routes of a local cluster. Temporary folders and
entries inside Kvant's cache (~/.cache/kvant) are not watched.

Tools the suite runs keep caches in the home folder by default (kubectl ~/.kube/cache, SGLang
~/.cache/sglang, matplotlib ~/.cache/matplotlib, transformers' copies of a repository's code
~/.cache/huggingface/modules); `redirect_tool_caches` points them at one temporary folder for the
session, through the environment every subprocess inherits.

The root conftest snapshots before the session and compares after it; anything new fails the run,
named, so a test that writes to `/source` or `/etc/kvant` cannot pass on the machine it dirties.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

WATCHED = (
    "/",
    "/etc",
    "/opt",
    "/srv",
    "/mnt",
    "/var/lib",
    "/usr/local",
    str(Path.home()),
    str(Path.home() / ".cache"),
)
# Where each tool reads its cache folder from. HF_MODULES_CACHE: where transformers copies a
# repository's own code before it imports it (trust_remote_code), read when transformers is imported.
TOOL_CACHE_VARIABLES = ("KUBECACHEDIR", "SGLANG_CACHE_DIR", "MPLCONFIGDIR", "HF_MODULES_CACHE")
_REDIRECTED = "KVANT_TEST_TOOL_CACHES"
SHARES_HOST = "KVANT_SUITE_SHARES_HOST"  # set by hack/test_suite.py for its unit lane
_CLUSTER_LINK = re.compile(r"^\d+: (kvant\d+n?)[@:]", re.MULTILINE)


def snapshot(root: Path = Path("/")) -> set[str]:
    """The entries of each watched folder (one level down), as host paths."""
    entries: set[str] = set()
    for folder in WATCHED:
        path = root / folder.lstrip("/")
        if path.is_dir():
            entries.update(str(Path(folder) / child.name) for child in path.iterdir())
    return entries


def network_snapshot() -> set[str]:
    """The local cluster's links and the routes into its test range, as text."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False).stdout
    routes = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True, check=False).stdout
    found = {f"link {name}" for name in _CLUSTER_LINK.findall(links)}
    found.update(f"route {line}" for line in routes.splitlines() if "198.18." in line or "198.19." in line)
    return found


def shares_host_with_a_cluster() -> bool:
    """True in `make test`'s unit lane (hack/test_suite.py), which starts no cluster but runs beside
    the lane that does: the links that lane's cluster adds meanwhile are its own to check."""
    return os.environ.get(SHARES_HOST) == "1"


def new_since(before: set[str], after: set[str]) -> list[str]:
    return sorted(after - before)


def redirect_tool_caches() -> None:
    """Points every tool cache at one session folder (set where the caller left them unset)."""
    root = Path(tempfile.mkdtemp(prefix="kvant-tool-caches-"))
    os.environ[_REDIRECTED] = str(root)
    for variable in TOOL_CACHE_VARIABLES:
        os.environ.setdefault(variable, str(root / variable.lower()))


def drop_tool_caches() -> None:
    root = os.environ.pop(_REDIRECTED, None)
    if root:
        shutil.rmtree(root, ignore_errors=True)
