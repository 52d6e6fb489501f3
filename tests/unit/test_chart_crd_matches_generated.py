"""The chart ships the generated QuantizedModel CRD byte for byte (helm installs crds/ first)."""

from __future__ import annotations

from pathlib import Path

from tests.helm_chart import CHART

GENERATED = Path(__file__).resolve().parents[2] / "crds" / "quantizedmodels.kvant.dev.yaml"


def test_chart_crd_is_identical_to_generated_crd():
    shipped = CHART / "crds" / GENERATED.name
    assert shipped.read_bytes() == GENERATED.read_bytes(), (
        f"{shipped} differs from {GENERATED}; regenerate and copy: "
        f"kvant crd --output {GENERATED.relative_to(GENERATED.parents[1])} && cp {GENERATED} {shipped}"
    )
