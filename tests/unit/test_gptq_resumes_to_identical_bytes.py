"""A GPTQ conversion stopped after some decoder layers publishes nothing; rerunning the same command
resumes at the first layer not done and publishes exactly the bytes of an uninterrupted run."""

import io
import json

import pytest

from kvant_contracts.artifact_manifest import MANIFEST_NAME
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.staging import STAGING_DIR
from kvant_runtime.convert.converter import Job, run
from kvant_runtime.convert.recipe import Recipe
from kvant_runtime.gptq.gptq_settings import GptqSettings
from kvant_runtime.job_progress import Progress
from tests.tiny_checkpoints import tiny_checkpoint

SETTINGS = GptqSettings(samples=4, sequence_length=64)


def state(output) -> dict:
    return json.loads((output / STAGING_DIR / "gptq" / "state.json").read_text())


def test_stopped_twice_then_finished_equals_one_uninterrupted_run(tmp_path):
    source = tiny_checkpoint("llama", num_hidden_layers=3)
    recipe = Recipe(group_size=32, method="gptq", gptq=SETTINGS)
    clean = run(Job(source, tmp_path / "clean", recipe, threads=2), Progress(human=None))
    assert clean is not None

    output = tmp_path / "stopped"
    assert run(Job(source, output, recipe, threads=2, stop_after_layers=1), Progress(human=None)) is None
    assert state(output)["layersDone"] == 1
    assert not (output / MANIFEST_NAME).exists() and not list(output.glob("*.safetensors"))
    staged = sorted(p.name for p in (output / STAGING_DIR / "gptq").iterdir())
    assert staged == ["hidden-00000.safetensors", "layer-00000.safetensors", "state.json"]

    resumed = io.StringIO()
    assert run(Job(source, output, recipe, threads=2, stop_after_layers=1), Progress(human=resumed)) is None
    assert "resuming at layer 2 (1 done)" in resumed.getvalue()
    assert state(output)["layersDone"] == 2 and not (output / MANIFEST_NAME).exists()

    said = io.StringIO()
    manifest = run(Job(source, output, recipe, threads=2), Progress(human=said))
    assert manifest is not None and "resuming at layer 3 (2 done)" in said.getvalue()
    assert manifest["digest"] == clean["digest"]
    assert manifest["files"] == clean["files"]
    assert not (output / STAGING_DIR).exists()


def test_a_rerun_with_other_gptq_settings_is_refused(tmp_path):
    source = tiny_checkpoint("llama", num_hidden_layers=3)
    output = tmp_path / "out"
    recipe = Recipe(group_size=32, method="gptq", gptq=SETTINGS)
    assert run(Job(source, output, recipe, threads=2, stop_after_layers=1), Progress(human=None)) is None
    other = Recipe(group_size=32, method="gptq", gptq=GptqSettings(samples=4, sequence_length=64, damp=0.1))
    with pytest.raises(CheckpointError, match="holds a partial conversion made with"):
        run(Job(source, output, other, threads=2), Progress(human=None))
