"""Node faults a test can cause: a node that stops reporting, as if it lost power or its network.

All nodes live in one agent process, so a lost node is the agent's pretence: it stops renewing that
node's Lease and status, kills its pods' processes and their network without a word to the API
server (their statuses still say Running, as a dead kubelet's would), and ignores what is scheduled
or deleted there. Kubernetes' own controllers then do what they do with a real lost node: the node
lifecycle controller marks it Unknown after its grace period, taints it and marks its pods not
ready; the taint manager evicts them after their toleration; their controllers start replacements.
Restored, the node reports again like a rebooted kubelet: it confirms the deletions that waited for
it and starts the pods still bound to it afresh, with new addresses (agent._allocate_ip).

The test names the lost nodes in a file below the agent's root, which the agent reads every tick.
"""

from __future__ import annotations

from pathlib import Path

LOST_NODES_FILE = Path("control") / "lost-nodes"


def lost_nodes(root: Path) -> frozenset[str]:
    """The nodes the agent under `root` is to treat as lost."""
    try:
        text = (root / LOST_NODES_FILE).read_text()
    except FileNotFoundError:
        return frozenset()
    return frozenset(line.strip() for line in text.splitlines() if line.strip())


def set_lost_nodes(root: Path, names: frozenset[str]) -> None:
    """Writes the lost nodes whole (a rename, so the agent never reads half a list)."""
    path = root / LOST_NODES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text("".join(f"{name}\n" for name in sorted(names)))
    partial.replace(path)
