"""One name per image everywhere: the chart's values, the operator's defaults, the Dockerfiles'
entrypoints and the local node agent's image map agree; the operator image carries no torch."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from kvant_dev.nodeagent.images import load_image_map, repository_name
from kvant_operator.settings import OperatorSettings
from tests.helm_chart import CHART, one, render

REPO = Path(__file__).resolve().parents[2]
IMAGES = {
    "kvant-operator": REPO / "images" / "operator.Dockerfile",
    "kvant-runtime": REPO / "images" / "runtime.Dockerfile",
}


def _entrypoint(dockerfile: Path) -> list[str]:
    lines = [line for line in dockerfile.read_text().splitlines() if line.startswith("ENTRYPOINT ")]
    assert len(lines) == 1, f"{dockerfile} needs exactly one ENTRYPOINT (exec form)"
    entrypoint: list[str] = json.loads(lines[0].removeprefix("ENTRYPOINT "))
    return entrypoint


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_dockerfile_entrypoint_is_the_node_agents(image: str):
    assert _entrypoint(IMAGES[image]) == load_image_map()[image].entrypoint


def test_chart_images_run_on_the_node_agent_and_match_operator_defaults():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    image_map = load_image_map()
    for key in ("operator", "runtime"):
        assert repository_name(values["image"][key]["repository"]) in image_map
    env = {
        e["name"]: e.get("value")
        for e in one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    defaults = OperatorSettings()
    assert env["KVANT_OPERATOR_IMAGE"] == defaults.operator_image
    assert env["KVANT_RUNTIME_IMAGE"] == defaults.runtime_image
    assert env["KVANT_ARTIFACT_PVC"] == defaults.artifact_pvc


def test_operator_image_copies_no_torch_packages():
    copied = re.findall(r"^COPY (\S+)", IMAGES["kvant-operator"].read_text(), flags=re.MULTILINE)
    assert sorted(copied) == ["cli/", "constraints.txt", "contracts/", "operator/"]


def test_runtime_image_is_sglang_plus_kvant_runtime():
    text = IMAGES["kvant-runtime"].read_text()
    assert re.search(r"^FROM lmsysorg/sglang:", text, flags=re.MULTILINE)
    copied = re.findall(r"^COPY (\S+)", text, flags=re.MULTILINE)
    assert sorted(copied) == ["cli/", "constraints.txt", "contracts/", "kernels/", "runtime/"]
    pinned = re.search(r"^sglang==(\S+)$", (REPO / "constraints.txt").read_text(), flags=re.MULTILINE)
    assert pinned is not None
    assert f"FROM lmsysorg/sglang:v{pinned.group(1)}-" in text  # the SGLang whose parser validates flags
