"""When one model's protection step runs: every spec.protection.metrics.intervalSeconds, and only while
something serves. The counter memory (for retraction rates) lives here, one per model daemon."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from kvant_operator.api.resource import QuantizedModel
from kvant_operator.protection.loop import ProtectionResult, Protector
from kvant_operator.protection.samples import CounterMemory


class ModelProtection:
    """Runs the protection step of one model every spec.protection.metrics.intervalSeconds."""

    def __init__(self, protector: Protector) -> None:
        self.protector = protector
        self.memory = CounterMemory()
        # Each serving pod's KV token usage in the last step that read it (reconcile/scale_in.py).
        self.pod_work: dict[str, float] = {}
        self.next_due = 0.0
        self.interval = 15.0

    def step_if_due(self, body: dict[str, Any]) -> ProtectionResult | None:
        now = time.monotonic()
        if now < self.next_due:
            return None
        try:
            spec = QuantizedModel.model_validate(body).spec
        except ValueError:
            return None  # the reconcile reports the invalid spec
        self.interval = float(spec.protection.metrics.interval_seconds)
        self.next_due = now + self.interval
        if not (body.get("status") or {}).get("readyReplicas"):
            return None  # nothing serves: there is nothing to measure
        result = self.protector.step(body, spec, self.memory, datetime.now(UTC).replace(microsecond=0))
        if result is not None:
            self.pod_work = result.usage
        return result

    def seconds_to_next(self) -> float:
        return max(0.5, self.next_due - time.monotonic())
