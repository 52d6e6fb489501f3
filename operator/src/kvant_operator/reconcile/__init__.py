"""Reconcile by step: `plan_step`, `artifact_step`, `evaluation_step`, `serving_step`, then `status`.

`Reconciler` runs them in order on one `Pass` (`state`), and `status` assembles what they found.
"""

from kvant_operator.reconcile.reconciler import Reconciler
from kvant_operator.reconcile.state import Outcome

__all__ = ["Outcome", "Reconciler"]
