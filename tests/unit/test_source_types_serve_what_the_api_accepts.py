"""The source seam: the API accepts exactly the URIs a source type serves, and each type says where
pods read its checkpoint."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from kvant_operator.reconcile import Reconciler
from kvant_operator.sources import SOURCE_TYPES, SOURCE_URI, file_source_refusal, locate_source
from tests.unit.memory_kube import MemoryKube
from tests.unit.reconcile_fixtures import NOW, SETTINGS
from tests.unit.render_inputs import body, spec_of

CLAIM = {"claimName": "models", "readOnly": True}


@pytest.mark.parametrize(
    ("uri", "volume", "sub_path"),
    [
        (
            "pvc://models/llama/3.1",
            {"persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
            "llama/3.1",
        ),
        ("pvc://models", {"persistentVolumeClaim": {"claimName": "models", "readOnly": True}}, ""),
        ("file:///data/tiny", {"hostPath": {"path": "/data/tiny", "type": "Directory"}}, ""),
    ],
)
def test_each_served_uri_has_a_place_in_the_pod(uri: str, volume: dict, sub_path: str) -> None:
    spec = spec_of(body(source={"uri": uri}))
    location = locate_source(spec.source.uri)
    assert location.volume == {"name": "source", **volume}
    assert (location.mount_path, location.sub_path) == ("/source", sub_path)


@pytest.mark.parametrize(
    "uri",
    ["hf://org", "hf://org/model/sub", "s3://Bad_Bucket/x", "s3://b", "ftp://host/m", "pvc://Bad_Claim/x"],
)
def test_a_uri_no_type_serves_is_refused_by_the_api(uri: str) -> None:
    with pytest.raises(
        ValidationError, match=re.escape("spec.source.uri must be pvc://<claim>/<path> or file:///")
    ):
        spec_of(body(source={"uri": uri}))
    assert re.search(SOURCE_URI, uri) is None


@pytest.mark.parametrize(
    "uri", ["hf://moonshotai/Kimi-K2-Instruct", "hf://Qwen/Qwen2.5-7B-Instruct", "s3://models/tiny"]
)
def test_a_fetched_uri_is_read_where_its_fetch_published_it(uri: str) -> None:
    spec = spec_of(body(source={"uri": uri}))
    with pytest.raises(ValueError, match="has not been fetched yet"):
        locate_source(spec.source.uri)
    location = locate_source(spec.source.uri, "pvc://kvant-artifacts/sources/hf/org/name/abc")
    assert location.volume["persistentVolumeClaim"] == {"claimName": "kvant-artifacts", "readOnly": True}
    assert location.sub_path == "sources/hf/org/name/abc"


def test_every_scheme_has_exactly_one_type() -> None:
    schemes = [t.scheme for t in SOURCE_TYPES]
    assert len(schemes) == len(set(schemes))
    for source_type in SOURCE_TYPES:
        assert source_type.pattern.startswith(f"{source_type.scheme}://")


@pytest.mark.parametrize(
    ("uri", "allowed"),
    [
        ("file:///var/lib/kvant/models/tiny", True),
        ("file:///var/lib/kvant/models", True),
        ("file:///var/lib/kvant/models-evil/x", False),
        ("file:///var/lib/kvant/models/../../../etc", False),
        ("file:///etc", False),
        ("pvc://models/x", True),  # not a hostPath: the prefixes do not apply
    ],
)
def test_a_file_source_must_lie_under_an_allowed_node_folder(uri: str, allowed: bool) -> None:
    refusal = file_source_refusal(uri, ("/var/lib/kvant/models",))
    assert (refusal is None) is allowed
    if not allowed:
        assert "fileSourcePrefixes" in str(refusal) and "pvc://" in str(refusal)


def test_a_file_source_outside_the_prefixes_fails_the_model_without_a_job() -> None:
    model = body(source={"uri": "file:///etc"}, weights={"format": "bf16"}, kvCache={"dtype": "bf16"})
    kube = MemoryKube()
    outcome = Reconciler(kube, SETTINGS).reconcile(model, now=NOW)
    degraded = next(c for c in outcome.status["conditions"] if c["type"] == "Degraded")
    assert (outcome.status["phase"], degraded["reason"]) == ("Failed", "SourceNotAllowed")
    assert kube.created == []


@pytest.mark.parametrize("dataset", ["/etc/passwd", "../secrets.txt", "data/../../x"])
def test_a_calibration_dataset_cannot_leave_the_source(dataset: str) -> None:
    with pytest.raises(ValidationError, match=re.escape("spec.kvCache.calibration.dataset must be builtin")):
        spec_of(
            body(kvCache={"dtype": "fp8_e4m3", "scales": "calibrate", "calibration": {"dataset": dataset}})
        )
