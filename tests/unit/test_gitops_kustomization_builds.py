"""examples/kustomization.yaml builds with kubectl's kustomize and carries every QuantizedModel example."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from kvant_dev.toolchain import Toolchain

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_kustomization_builds_every_example_unchanged():
    built = subprocess.run(
        [str(Toolchain.locate().kubectl), "kustomize", str(EXAMPLES)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rendered = {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(built) if doc}
    examples = [
        yaml.safe_load(p.read_text())
        for p in sorted(EXAMPLES.glob("*.yaml"))
        if p.name != "kustomization.yaml"
    ]
    assert sorted(rendered) == sorted(e["metadata"]["name"] for e in examples)
    for example in examples:
        assert rendered[example["metadata"]["name"]] == example  # kustomize adds and drops nothing
