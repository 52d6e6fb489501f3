"""The capacity planner: pure functions from a checkpoint and a serving request to a CapacityPlan."""

from kvant_operator.planner.checkpoint import Checkpoint, load_checkpoint
from kvant_operator.planner.plan import CapacityPlan, PlanRequest, compare, make_plan

__all__ = ["CapacityPlan", "Checkpoint", "PlanRequest", "compare", "load_checkpoint", "make_plan"]
