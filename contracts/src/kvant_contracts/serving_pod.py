"""What the serving pod's renderer (operator) and its gate (runtime) must agree on.

The engine listens on the pod's loopback; the gate's metrics listener is the pod's read-only window
onto it: `/metrics` carries the gate's series followed by the engine's, and `ENGINE_HEALTH_PATH`
answers with the engine's own `/health`, for the engine container's probes.
"""

from __future__ import annotations

ENGINE_HEALTH_PATH = "/engine/health"
# SGLang's /health generates one token and waits at least 1 s, and up to SGLANG_HEALTH_CHECK_TIMEOUT
# (20 s), for the scheduler to answer; it answers 503 itself past that. So the gate waits that long for
# it, and the engine's probes wait a little longer: a kubelet's default 1 s probe timeout failed every
# probe of the real engine, and liveness restarted a healthy engine (found running SGLang on CPU).
ENGINE_HEALTH_SECONDS = 22
ENGINE_PROBE_TIMEOUT_SECONDS = 25
GATE_METRICS_PATH = "/gate/metrics"  # the gate's own metrics on its serving port (its liveness probe)
# The gate container's readiness probe, and the router's health check of each engine pod: passed to the
# engine's own /health, except while the gate drains (kvant_contracts.drain), when the gate answers 503.
GATE_READINESS_PATH = "/health"
# The gate's kvant_gate_rejected_total reasons that mean "this replica is full" (429/503); the
# alerts, the dashboard and `kvant status` count these. `evicted` (a queued request of a lower class
# made room for a higher one) and `deadline` (it could not start in time) are for want of room too;
# `tenant_rate` (a tenant over its own tokensPerMinute) is not: more replicas would not lift it.
GATE_BUSY_REASONS = ("queue_full", "queue_timeout", "queue_bytes", "overloaded", "evicted", "deadline")
# Where things listen in a serving pod: the engine on loopback only, the gate's serving and metrics
# listeners on the pod IP (the renderer passes them to the gate and builds Service, probes and the
# NetworkPolicy from them).
ENGINE_HOST, ENGINE_PORT, GATE_PORT, METRICS_PORT = "127.0.0.1", 30000, 8000, 9090
# A prefill engine's bootstrap server (SGLang's --disaggregation-bootstrap-port, its default): the
# engine binds it on loopback, the gate relays the pod IP's same port to it, and the router learns it
# from the pod's `sglang.ai/bootstrap-port` annotation.
BOOTSTRAP_PORT = 8998
# Where the gate finds its API credentials: the ServiceAccount token, the cluster CA (`ca.crt`) and
# `namespace`, projected into the gate container only (the standard in-cluster path, so client
# libraries find it too). With them, the gate watches its limits ConfigMap through the API.
API_CREDENTIALS_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The admin token reaches the engine container as this variable (from the model's Secret), never in
# the launch spec; `kvant launch` passes it to SGLang as --admin-api-key.
ADMIN_KEY_ENV = "KVANT_ADMIN_API_KEY"
