"""The artifact key: one per recipe and location, so models with the same recipe share one Job."""

from __future__ import annotations

from typing import Any

from kvant_operator import artifact_recipe
from kvant_operator.artifact_recipe import artifact_key
from tests.unit.render_inputs import body, spec_of


def _key(**spec_overrides: Any) -> str:
    return artifact_key(spec_of(body(**spec_overrides)))


def test_same_recipe_same_key_regardless_of_serving_and_limits():
    base = _key()
    assert _key(limits={"maxConcurrency": 2}) == base
    assert _key(serving={"engine": "simulator", "replicas": 3, "gpu": {"memoryGiB": 80}}) == base
    manifest = body()
    manifest["metadata"]["name"] = "another-model"
    assert artifact_key(spec_of(manifest)) == base


def test_anything_that_changes_the_bytes_or_their_place_changes_the_key():
    base = _key()
    assert _key(weights={"format": "int4", "groupSize": 64}) != base
    assert _key(kvCache={"dtype": "fp8_e4m3", "scales": "calibrate", "calibration": {"samples": 9}}) != base
    assert _key(source={"uri": "file:///elsewhere"}) != base
    assert _key(weights={"format": "int4", "groupSize": 32, "output": {"pvc": "other"}}) != base


def test_only_new_converter_bytes_change_every_key(monkeypatch):
    # No operator setting enters the key (a key that followed the runtime image's tag reconverted
    # every model and moved every engine to a new path on each release); a converter that writes
    # other bytes for the same recipe bumps its version, and only then.
    base = _key()
    monkeypatch.setattr(artifact_recipe, "ARTIFACT_BYTES_VERSION", "0.2.0")
    assert _key() != base
