"""GPTQ is sequential over layers: `--workers > 1` is refused in one line; GPTQ flags need --method gptq;
the CLI has no test hook (tests stop a conversion through the Python API)."""

import pytest

from kvant_cli.main import main
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.convert.converter import Job
from kvant_runtime.convert.recipe import Recipe
from kvant_runtime.gptq.gptq_settings import GptqSettings
from tests.tiny_checkpoints import tiny_checkpoint


def test_two_workers_are_refused_with_one_clear_line(tmp_path, capsys):
    source = tiny_checkpoint("llama")
    capsys.readouterr()  # making the checkpoint writes progress bars
    assert main(["convert", str(source), str(tmp_path / "out"), "--method", "gptq", "--workers", "2"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0]
    assert "--method gptq runs in one worker" in lines[0]
    assert not (tmp_path / "out").exists()

    with pytest.raises(CheckpointError, match="runs in one worker"):
        Job(source, tmp_path / "out", Recipe(method="gptq"), worker_index=1, workers=2)


def test_gptq_flags_without_gptq_and_bad_settings_are_refused(tmp_path, capsys):
    source = tiny_checkpoint("llama")
    capsys.readouterr()
    assert main(["convert", str(source), str(tmp_path / "out"), "--samples", "4", "--no-act-order"]) == 1
    said = capsys.readouterr().err
    assert "--samples, --act-order: GPTQ settings apply only to --method gptq" in said
    assert "Traceback" not in said and len(said.strip().splitlines()) == 1

    with pytest.raises(CheckpointError, match="--method 'awq' is not supported; valid: rtn, gptq"):
        Recipe(method="awq")
    with pytest.raises(CheckpointError, match="--damp 0"):
        GptqSettings(damp=0)
    with pytest.raises(CheckpointError, match="apply only to --method gptq"):
        Recipe(gptq=GptqSettings())


def test_help_lists_the_gptq_flags_and_the_cli_has_no_test_hook(capsys, tmp_path):
    with pytest.raises(SystemExit):
        main(["convert", "--help"])
    said = capsys.readouterr().out
    for flag in ("--method", "--samples", "--sequence-length", "--damp", "--act-order", "--no-act-order"):
        assert flag in said
    # Tests stop a conversion through the Python API (Job.stop_after_layers); the CLI has no such flag.
    with pytest.raises(SystemExit) as refused:
        main(
            ["convert", str(tmp_path), str(tmp_path / "out"), "--method", "gptq", "--stop-after-layers", "1"]
        )
    assert refused.value.code == 2 and "--stop-after-layers" in capsys.readouterr().err
