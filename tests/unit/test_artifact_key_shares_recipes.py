"""The artifact key: one per recipe and location, so models with the same recipe share one Job."""

from __future__ import annotations

from typing import Any

from kvant_operator import artifact_recipe
from kvant_operator.artifact_recipe import artifact_key
from kvant_operator.settings import OperatorSettings
from tests.unit.render_inputs import body, spec_of

SETTINGS = OperatorSettings()


def _key(**spec_overrides: Any) -> str:
    return artifact_key(spec_of(body(**spec_overrides)), SETTINGS)


def test_same_recipe_same_key_regardless_of_serving_and_limits():
    base = _key()
    assert _key(limits={"maxConcurrency": 2}) == base
    assert _key(serving={"engine": "simulator", "replicas": 3, "gpu": {"memoryGiB": 80}}) == base
    manifest = body()
    manifest["metadata"]["name"] = "another-model"
    assert artifact_key(spec_of(manifest), SETTINGS) == base


def test_anything_that_changes_the_bytes_or_their_place_changes_the_key():
    base = _key()
    assert _key(weights={"format": "int4", "groupSize": 64}) != base
    assert _key(kvCache={"dtype": "fp8_e4m3", "scales": "calibrate", "calibration": {"samples": 9}}) != base
    assert _key(source={"uri": "file:///elsewhere"}) != base
    assert _key(weights={"format": "int4", "groupSize": 32, "output": {"pvc": "other"}}) != base


def test_a_new_runtime_release_keeps_every_key_and_new_converter_bytes_change_it(monkeypatch):
    base = _key()
    # An operator upgrade brings a new runtime image; a key that followed its tag reconverted every
    # model and moved every engine to a new path on each release.
    newer = OperatorSettings(runtime_image="ghcr.io/kvant-dev/kvant-runtime:0.2.0")
    assert artifact_key(spec_of(body()), newer) == base
    # A converter that writes other bytes for the same recipe bumps its version, and only then.
    monkeypatch.setattr(artifact_recipe, "ARTIFACT_BYTES_VERSION", "0.2.0")
    assert _key() != base
