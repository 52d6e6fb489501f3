"""Shared inputs for the reconcile-step tests: a model, a pass over it, and the lines its Jobs print."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from kvant_contracts.kube_object import Obj
from kvant_operator.api.status import Condition
from kvant_operator.planner.capacity_plan import PlanRequest, make_plan
from kvant_operator.planner.checkpoint_view import load_checkpoint
from kvant_operator.reconcile.state import ConditionLog, Pass
from kvant_operator.settings import OperatorSettings
from tests.unit.render_inputs import body, plan, spec_of

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
SETTINGS = OperatorSettings()
NAMESPACE = "team-a"

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_size": 64,
    "intermediate_size": 128,
    "vocab_size": 256,
    "max_position_embeddings": 2048,
    "torch_dtype": "bfloat16",
}


def new_pass(model: Obj, *, planned: bool = False, now: datetime = NOW) -> Pass:
    """A pass over `model` as the reconciler starts it; `planned` gives it a plan already."""
    status = model.get("status") or {}
    log = ConditionLog(
        [Condition.model_validate(c) for c in status.get("conditions") or []],
        int(model["metadata"]["generation"]),
        now,
    )
    return Pass(model, spec_of(model), log, plan=plan() if planned else None)


def plan_log(model: Obj, tmp_path: Path) -> str:
    """What the plan Job's `kvant plan --json` prints for `model` on a small Llama checkpoint."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    capacity = make_plan(load_checkpoint(config), PlanRequest.from_spec(spec_of(model)))
    return json.dumps(capacity.model_dump(mode="json"), indent=2)


def condition(p: Pass, kind: str) -> Condition:
    found = next((c for c in p.log.conditions if c.type == kind), None)
    assert found is not None, f"no {kind} condition in {[c.type for c in p.log.conditions]}"
    return found


__all__ = ["NAMESPACE", "NOW", "SETTINGS", "body", "condition", "new_pass", "plan_log"]
