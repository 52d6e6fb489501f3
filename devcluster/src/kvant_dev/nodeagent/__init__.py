"""A kubelet stand-in for machines without a container runtime.

It registers GPU nodes, keeps their Lease fresh and runs the pods bound to them
as local processes, each in its own mount namespace and on its own loopback IP.
Only Kvant's own images run (see images.yaml); containers must bind to their
pod IP (the downward API's status.podIP), since pods share the host network.
"""
