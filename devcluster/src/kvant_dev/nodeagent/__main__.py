"""`python -m kvant_dev.nodeagent`: run the local node agent until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path
from types import FrameType

from kubernetes import config as kube_config

from kvant_dev.nodeagent.agent import AgentConfig, NodeAgent


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m kvant_dev.nodeagent", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--root", type=Path, required=True, help="folder for pod volumes and logs")
    parser.add_argument("--pki-dir", type=Path, required=True, help="the cluster CA (signs the log endpoint)")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument(
        "--spare-nodes", type=int, default=0, help="more nodes, registered cordoned (tests move pods there)"
    )
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--kubelet-version", default="v0.0.0")
    parser.add_argument("--tie-pods", action="store_true", help="pods die with the agent (tests)")
    parser.add_argument("--prometheus-targets", type=Path, help="write Prometheus file_sd targets here")
    parser.add_argument("--node-netns", type=Path, required=True, help="the node network namespace")
    parser.add_argument("--network-slot", type=int, required=True, help="the cluster's network slot")
    parser.add_argument("--cluster-dns", help="the DNS server ClusterFirst pods use (none: no cluster DNS)")
    parser.add_argument(
        "--projection-delay",
        type=float,
        default=AgentConfig.projection_delay,
        metavar="SECONDS",
        help="how long a ConfigMap or Secret edit waits before it reaches running pods' volumes, as a "
        "kubelet's periodic pod sync (--sync-frequency) delays it (default: %(default)s; 0: at once)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    api = kube_config.new_client_from_config(str(args.kubeconfig))
    agent = NodeAgent(
        api,
        AgentConfig(
            root=args.root,
            pki_dir=args.pki_dir,
            node_netns=args.node_netns,
            network_slot=args.network_slot,
            cluster_dns=args.cluster_dns,
            nodes=args.nodes,
            spare_nodes=args.spare_nodes,
            gpus_per_node=args.gpus_per_node,
            kubelet_version=args.kubelet_version,
            tied_to_parent=args.tie_pods,
            prometheus_targets=args.prometheus_targets,
            projection_delay=args.projection_delay,
        ),
    )

    def on_term(signum: int, frame: FrameType | None) -> None:
        agent.stop()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    agent.run()


if __name__ == "__main__":
    main()
