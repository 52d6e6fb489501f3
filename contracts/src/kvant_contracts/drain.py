"""How a serving pod leaves without dropping a request: the gate drains, the engine outlives it.

On SIGTERM the gate turns not-ready (its readiness path answers 503), keeps admitting and serving
whatever still reaches it, and exits once it holds nothing and nothing has arrived for
DRAIN_QUIET_SECONDS, or at DRAIN_CEILING_SECONDS, whichever comes first. It waits for the answers it
holds to end, never for an estimate of how long they may take. The engine container's preStop hook
(`drain_wait_script`) holds the engine's SIGTERM until the gate has gone, so an in-flight request
never loses its engine. The pod's terminationGracePeriodSeconds is POD_TERMINATION_GRACE_SECONDS.

The ceiling is a constant the pod template carries, not derived from spec.limits: any change to the
template rolls the pods and restarts every engine, and spec.limits promises that editing them never
does. See docs/concepts/autoscaling.md ("Scale-in that drops nothing").
"""

from __future__ import annotations

from typing import Final

# Requests keep arriving for a moment after the pod turns not-ready: the EndpointSlice change has to
# reach every node's kube-proxy and the router has to drop the pod, each a second or two on a busy
# cluster. A gate that left as soon as it was idle would refuse (connection refused) what was routed
# to it in that window, so it waits until nothing has arrived for this long.
DRAIN_QUIET_SECONDS: Final = 5.0
# The most a leaving pod waits for the answers it admitted: 36,000 tokens at 20 tokens/s, a slow
# sequence of a large model under a full batch. Before issue #40 it was 300 s, and the gate cut at an
# estimate from the limits (138 s by default) besides. How long scale-in or a node drain may hold a
# replica's GPUs when its answers are that long; an idle pod leaves after DRAIN_QUIET_SECONDS. A cluster
# autoscaler applies its own cap (`--max-graceful-termination-sec`, 600 s by default) to the nodes it
# removes.
DRAIN_CEILING_SECONDS: Final = 1800
# Seconds the gate's listeners give a request still running at the deadline before closing on it.
GATE_CLOSE_SECONDS: Final = 1.0
# After the gate's deadline: its close, the preStop hook noticing, and the engine's own exit on SIGTERM.
DRAIN_MARGIN_SECONDS: Final = 15
POD_TERMINATION_GRACE_SECONDS: Final = DRAIN_CEILING_SECONDS + DRAIN_MARGIN_SECONDS
# The gate's own page saying whether it drains, on its serving port (next to its metrics), and the
# field of its JSON answer the preStop hook reads.
GATE_DRAIN_PATH: Final = "/gate/drain"
DRAINING_FIELD: Final = "draining"
# How long the preStop hook waits to see the gate draining. The kubelet signals the gate and starts the
# engine's hook at the same moment, so the gate may not have begun yet; a gate still not draining after
# this is not leaving at all: the engine alone is being restarted (a failed liveness probe).
DRAIN_NOTICE_SECONDS: Final = 3.0
_POLL_SECONDS: Final = 0.5


def drain_wait_script(
    port: int, seconds: float, notice: float = DRAIN_NOTICE_SECONDS, poll: float = _POLL_SECONDS
) -> str:
    """A Python program (stdlib only, so any image's python3 runs it: SGLang's has no Kvant) that
    returns once the gate on `port` of the pod's loopback has closed, or says it is not draining after
    `notice` seconds, or after `seconds` at most. It prints why it returned."""
    return f"""\
import http.client, json, socket, time
start = time.monotonic()
why = "the drain deadline passed"
while time.monotonic() - start < {seconds:g}:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", {port:d}, timeout=5)
        conn.request("GET", "{GATE_DRAIN_PATH}")
        draining = json.loads(conn.getresponse().read()).get("{DRAINING_FIELD}") is True
        conn.close()
    except socket.timeout:
        draining = True
    except Exception:
        why = "the gate has closed"
        break
    if not draining and time.monotonic() - start >= {notice:g}:
        why = "the gate is not draining"
        break
    time.sleep({poll:g})
print(why)
"""
