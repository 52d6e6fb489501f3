"""The source seam: the API accepts exactly the URIs a source type serves, and each type says where
pods read its checkpoint."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from kvant_operator.sources import SOURCE_TYPES, SOURCE_URI, locate_source
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


@pytest.mark.parametrize("uri", ["hf://org/model", "s3://bucket/prefix", "ftp://host/m", "pvc://Bad_Claim/x"])
def test_a_uri_no_type_serves_is_refused_by_the_api(uri: str) -> None:
    with pytest.raises(
        ValidationError, match=re.escape("spec.source.uri must be pvc://<claim>/<path> or file:///")
    ):
        spec_of(body(source={"uri": uri}))
    assert re.search(SOURCE_URI, uri) is None


def test_every_scheme_has_exactly_one_type() -> None:
    schemes = [t.scheme for t in SOURCE_TYPES]
    assert len(schemes) == len(set(schemes))
    for source_type in SOURCE_TYPES:
        assert source_type.pattern.startswith(f"{source_type.scheme}://")
