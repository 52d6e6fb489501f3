"""Rendering without a cluster: the same renderers, with the plan computed locally."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from kvant_contracts.kube_object import Obj
from kvant_operator.api.resource import QuantizedModel
from kvant_operator.api.status import ArtifactStatus, SourceStatus
from kvant_operator.artifact_recipe import (
    artifact_key,
    artifact_location,
    artifact_uri,
    needs_artifact,
    source_location,
)
from kvant_operator.hashing import digest
from kvant_operator.planner.architecture import ConfigError
from kvant_operator.planner.calibration_sizing import with_calibration
from kvant_operator.planner.capacity_plan import PlanRequest, make_plan
from kvant_operator.planner.checkpoint_view import load_checkpoint
from kvant_operator.planner.gptq_sizing import with_gptq
from kvant_operator.planner.inventory import InventoryError
from kvant_operator.render import jobs
from kvant_operator.render.fetch_job import fetch_job, fetch_key
from kvant_operator.render.serving import ServingInputs, serving_objects
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import is_fetched


class OfflineRenderError(ValueError):
    pass


def render_offline(manifest: Obj, checkpoint: Path | None, namespace: str) -> list[Obj]:
    try:
        model = QuantizedModel.model_validate(manifest)
    except ValidationError as err:
        raise OfflineRenderError(f"invalid QuantizedModel: {err}") from None
    body = model.to_manifest()
    body["metadata"].setdefault("namespace", namespace)
    spec, settings = model.spec, OperatorSettings.from_env()
    try:
        plan_from = checkpoint or _local_source(spec.source.uri)
        plan = make_plan(load_checkpoint(plan_from), PlanRequest.from_spec(spec)).to_status()
    except (ConfigError, InventoryError) as err:
        raise OfflineRenderError(str(err)) from None
    if plan.refusal is not None:
        raise OfflineRenderError(f"the capacity plan starts no engine: {plan.refusal}")
    plan = plan.model_copy(update={"inputs": digest(jobs.plan_inputs(spec))})
    plan = with_gptq(with_calibration(plan, spec), spec)
    objects: list[Obj] = []
    fetched = None
    if is_fetched(spec.source.uri):
        # The fetch Job, and what its result will be: the folder is named by the resolved revision,
        # which only the fetch learns.
        objects.append(fetch_job([body], spec, settings, fetch_key(spec, settings), attempt=1))
        fetched = SourceStatus(
            uri=spec.source.uri,
            revision="<resolved by the fetch>",
            location=f"pvc://{settings.artifact_pvc}/sources/<resolved by the fetch>",
            digest="sha256:<set when fetched>",
        )
    objects.append(jobs.plan_job(body, spec, settings, fetched))
    location = source_location(spec, fetched)
    artifact = ArtifactStatus(uri=spec.source.uri)
    if needs_artifact(spec):
        key = artifact_key(spec, fetched)
        objects.append(jobs.artifact_job([body], spec, settings, key, attempt=1, fetched=fetched, plan=plan))
        location = artifact_location(spec, settings, key)
        artifact = ArtifactStatus(uri=artifact_uri(spec, settings, key), digest="sha256:<set when published>")
    objects += serving_objects(ServingInputs(body, spec, plan, location, artifact.digest, settings), None)
    return objects


def _local_source(uri: str) -> Path:
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    raise OfflineRenderError(f"cannot read {uri} without a cluster: pass --checkpoint DIR (or a config.json)")
