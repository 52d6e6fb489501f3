"""What the serving pod's renderer (operator) and its gate (runtime) must agree on.

The engine listens on the pod's loopback; the gate's metrics listener is the pod's read-only window
onto it: `/metrics` carries the gate's series followed by the engine's, and `ENGINE_HEALTH_PATH`
answers with the engine's own `/health`, for the engine container's probes.
"""

from __future__ import annotations

ENGINE_HEALTH_PATH = "/engine/health"
