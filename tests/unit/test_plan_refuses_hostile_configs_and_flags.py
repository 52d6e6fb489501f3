"""`kvant plan` on hostile input: every config field and flag is checked, and a bad one ends in exit 2
with a message naming it, never a traceback, a hang or a nonsensical plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvant_cli.main import main
from tests.unit.planner_configs import deepseek_v3, llama_3_1_70b, write_config


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    try:
        code = main(["plan", *args])
    except SystemExit as exit_:  # argparse's own refusals
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.err


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_hidden_layers", -1),
        ("num_hidden_layers", 0),
        ("num_hidden_layers", 10**12),  # would loop over every layer
        ("hidden_size", "8192"),
        ("hidden_size", True),
        ("vocab_size", 1.5),
        ("num_key_value_heads", 7),  # 64 heads do not divide into 7 groups
        ("head_dim", -128),
        ("intermediate_size", None),
    ],
)
def test_a_bad_config_field_is_named(tmp_path: Path, capsys, field: str, value: object) -> None:
    config = {**llama_3_1_70b(), field: value}
    code, err = _plan(capsys, "--config", str(write_config(tmp_path, config)), "--gpu-memory-gib", "80")
    assert code == 2 and (field in err or "num_attention_heads" in err), err


def test_a_bad_mla_field_is_named(tmp_path: Path, capsys) -> None:
    config = {**deepseek_v3(), "kv_lora_rank": -512}
    code, err = _plan(capsys, "--config", str(write_config(tmp_path, config)), "--gpu-memory-gib", "141")
    assert code == 2 and "kv_lora_rank" in err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--gpu-memory-gib", "0"),
        ("--gpu-memory-gib", "-80"),
        ("--gpu-memory-gib", "nan"),
        ("--gpu-memory-gib", "inf"),
        ("--mem-fraction-static", "5"),
        ("--mem-fraction-static", "0"),
        ("--tp", "0"),
        ("--tp", "two"),
        ("--page-size", "-1"),
        ("--context", "0"),
    ],
)
def test_a_bad_flag_is_named(tmp_path: Path, capsys, flag: str, value: str) -> None:
    args = ["--config", str(write_config(tmp_path, llama_3_1_70b())), "--gpu-memory-gib", "80", flag, value]
    code, err = _plan(capsys, *args)
    assert code == 2 and flag in err, err


def test_a_sound_plan_still_plans(tmp_path: Path, capsys) -> None:
    args = ["--config", str(write_config(tmp_path, llama_3_1_70b())), "--gpu-memory-gib", "80", "--tp", "4"]
    code, _ = _plan(capsys, *args, "--json")
    assert code == 0
