"""The renderers' output for the shipped examples, compared with reviewed golden files.

Set KVANT_UPDATE_GOLDEN=1 to rewrite them after an intended change, then review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from kvant_operator.api.status import SourceStatus
from kvant_operator.artifact_recipe import artifact_key, artifact_location
from kvant_operator.render import jobs
from kvant_operator.render.gate_access import gate_identity
from kvant_operator.render.limits_configmap import limits_configmap
from kvant_operator.render.roles import disruption_budget, roles
from kvant_operator.render.serving import ServingInputs, deployment, service
from kvant_operator.settings import OperatorSettings
from kvant_operator.sources import is_fetched
from tests.unit.render_inputs import body, plan, spec_of

GOLDEN = Path(__file__).parent / "golden"


# What a fetch of a fetched source (tiny-from-s3.yaml) resolved to, fixed for the renderings.
FETCHED = SourceStatus(
    uri="s3://models/tiny-llama",
    revision="listing-0123",
    location="pvc://kvant-artifacts/sources/0123",
    digest="sha256:0123",
)


def _render(example: str) -> list[dict]:
    manifest, settings = body(example), OperatorSettings()
    spec = spec_of(manifest)
    fetched = FETCHED if is_fetched(spec.source.uri) else None
    key = artifact_key(spec, fetched)
    inputs = ServingInputs(
        manifest, spec, plan(), artifact_location(spec, settings, key), "sha256:abc", settings
    )
    objects = [
        jobs.plan_job(manifest, spec, settings, fetched),
        jobs.artifact_job([manifest], spec, settings, key, attempt=1, plan=plan(), fetched=fetched),
        limits_configmap(manifest, spec, None),
        *gate_identity(manifest),
    ]
    for role in roles(spec):
        objects += [deployment(inputs, role), service(manifest, role), disruption_budget(manifest, role)]
    return objects


@pytest.mark.parametrize(
    "example",
    [
        "tiny.yaml",
        "tinychat-cpu.yaml",
        "kimi-k2-int4-experts-fp8kv-8xh200.yaml",
        "llama-70b-prefill-decode-fp8kv.yaml",
    ],
)
def test_rendered_objects_match_golden(example: str) -> None:
    rendered = yaml.safe_dump_all(_render(example), sort_keys=True)
    golden = GOLDEN / example
    if os.environ.get("KVANT_UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert rendered == golden.read_text(), f"renderer output changed; review and refresh {golden}"
