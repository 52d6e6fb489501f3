"""The capacity planner: pure functions from a checkpoint and a serving request to a CapacityPlan."""

from kvant_operator.planner.capacity_plan import CapacityPlan, PlanRequest, compare, make_plan
from kvant_operator.planner.checkpoint_view import Checkpoint, load_checkpoint

__all__ = ["CapacityPlan", "Checkpoint", "PlanRequest", "compare", "load_checkpoint", "make_plan"]
