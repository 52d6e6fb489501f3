"""Fixed inputs for renderer tests: a QuantizedModel as the API server would hand it over, and a plan."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from kvant_contracts.kube_object import Obj
from kvant_operator.api.resource import QuantizedModel
from kvant_operator.api.spec import QuantizedModelSpec
from kvant_operator.api.status import PlanStatus
from kvant_operator.render.roles import roles
from kvant_operator.render.serving import ServingInputs, deployment
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import Location

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def body(example: str = "tiny.yaml", **spec_overrides: Any) -> Obj:
    manifest: Obj = yaml.safe_load((EXAMPLES / example).read_text())
    manifest["metadata"].update(
        {"namespace": "team-a", "uid": "0b7c6c1e-1111-2222-3333-444455556666", "generation": 3}
    )
    manifest["spec"].update(copy.deepcopy(spec_overrides))
    return manifest


def spec_of(manifest: Obj) -> QuantizedModelSpec:
    return QuantizedModel.model_validate(manifest).spec


def plan(kv_tokens: int = 3_773_701, dtype: str = "fp8_e4m3") -> PlanStatus:
    return PlanStatus.model_validate(
        {
            "kvCacheDtype": dtype,
            "kvBytesPerTokenPerGPU": 256,
            "weightBytesPerGPU": 300_000,
            "kvTokensPerReplica": kv_tokens,
            "memFractionStatic": 0.9,
            "pageSize": 1,
            "maxConcurrency": {"4096": 921, "32768": 115, "131072": 28},
            "inputs": "d1g3st",
            "weights": {"format": "int4", "groupSize": 128},  # targets: as the spec says (dense)
        }
    )


ENGINE_MODEL_DIR = Location({"name": "artifacts", "emptyDir": {}}, "/artifacts", "m/abc")


def engine_containers(example: str, serving: dict[str, object]) -> list[Obj]:
    """The engine container of each role the example renders, with `serving` merged into its
    spec.serving (against the fixed plan above)."""
    manifest = body(example)
    manifest["spec"]["serving"].update(serving)
    spec = spec_of(manifest)
    inputs = ServingInputs(manifest, spec, plan(), ENGINE_MODEL_DIR, "sha256:abc", OperatorSettings())
    return [deployment(inputs, role)["spec"]["template"]["spec"]["containers"][0] for role in roles(spec)]
