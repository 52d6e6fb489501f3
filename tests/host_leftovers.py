"""What the suite must never leave on the host: new entries in its system folders, or network links
and routes of a local cluster. Temporary folders and the cache (~/.cache/kvant) are not watched.

The root conftest snapshots before the session and compares after it; anything new fails the run,
named, so a test that writes to `/source` or `/etc/kvant` cannot pass on the machine it dirties.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

WATCHED = ("/", "/etc", "/opt", "/srv", "/mnt", "/var/lib", "/usr/local")
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


def new_since(before: set[str], after: set[str]) -> list[str]:
    return sorted(after - before)
