"""The checked-in CRD and its reference are exactly what the models generate today."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvant_cli.main import main

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("path", "extra"),
    [("crds/quantizedmodels.kvant.dev.yaml", []), ("docs/crd-reference.md", ["--reference"])],
)
def test_checked_in_file_matches_fresh_generation(path: str, extra: list[str]):
    assert main(["crd", *extra, "--check", "--output", str(ROOT / path)]) == 0, (
        f"{path} is stale: run `kvant crd {' '.join(extra)} --output {path}`"
    )


def test_check_fails_on_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    stale = tmp_path / "crd.yaml"
    main(["crd", "--output", str(stale)])
    stale.write_text(stale.read_text().replace("shortNames:\n    - qm", "shortNames:\n    - qms"))
    assert main(["crd", "--check", "--output", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
