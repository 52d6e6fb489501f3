"""`kvant plan`: JSON for machines (the simulator reads it), a comparison table for people."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvant_cli.main import main
from tests.unit.planner_configs import deepseek_v3, kimi_k2, llama_3_1_70b, write_config

SIMULATOR_KEYS = {
    "kv_bytes_per_token_per_gpu",
    "weight_bytes_per_gpu",
    "kv_tokens_per_replica",
    "mem_fraction_static",
    "max_concurrency",
    "page_size",
    "kv_cache_dtype",
}


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["plan", *argv, "--json"]) == 0
    plan: dict[str, Any] = json.loads(capsys.readouterr().out)
    return plan


def test_json_has_the_keys_the_simulator_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    config = write_config(tmp_path, llama_3_1_70b())
    plan = plan_json(
        capsys, "--config", str(config), "--tp", "8", "--gpu-memory-gib", "80", "--kv-dtype", "bf16"
    )
    assert plan.keys() >= SIMULATOR_KEYS
    assert plan["kv_bytes_per_token_per_gpu"] == 40_960
    assert plan["kv_cache_dtype"] == "bf16"
    assert set(plan["max_concurrency"]) == {"4096", "32768", "131072"}
    assert plan["max_concurrency"]["4096"] == plan["kv_tokens_per_replica"] // 4096


def test_flags_reach_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    config = write_config(tmp_path, deepseek_v3())
    plan = plan_json(
        capsys,
        *("--config", str(tmp_path), "--tp", "8", "--gpu-memory-gib", "141", "--weights", "int4"),
        *("--group-size", "32", "--targets", "experts", "--mem-fraction-static", "0.85", "--page-size", "64"),
        *("--context", "8192", "--context", "65536"),
    )
    assert config.parent == tmp_path
    assert (plan["weights_format"], plan["group_size"], plan["targets"]) == ("int4", 32, "experts")
    assert (plan["mem_fraction_static"], plan["page_size"]) == (0.85, 64)
    assert plan["kv_tokens_per_replica"] % 64 == 0
    assert set(plan["max_concurrency"]) == {"8192", "65536"}
    assert plan["checkpoint_bytes"] < plan["source_checkpoint_bytes"]


def test_table_compares_kv_dtypes_and_weight_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    config = write_config(tmp_path, llama_3_1_70b())
    assert (
        main(["plan", "--config", str(config), "--tp", "8", "--gpu-memory-gib", "80", "--weights", "int4"])
        == 0
    )
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "KV" in line and "+" in line)
    for column in ("int4 + fp8_e4m3 KV *", "bf16 + bf16 KV", "bf16 + fp8_e4m3 KV", "int4 + bf16 KV"):
        assert column in header
    assert "KV tokens per replica" in out and "max concurrency @128K" in out


def test_unreadable_config_is_an_error_message_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    config = write_config(tmp_path, {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    assert main(["plan", "--config", str(config), "--gpu-memory-gib", "80"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvant plan: ") and "GPT2LMHeadModel" in err and "Traceback" not in err


def test_render_of_a_model_that_fits_no_gpu_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    """Kimi-K2 in BF16 on one 8 x H200 node (issue #43's case): `kvant render` ended in a traceback
    (the launch spec refused maxTotalTokens 0); now it says why, in one line, and exits 2."""
    config = {key: value for key, value in kimi_k2().items() if key != "quantization_config"}
    write_config(tmp_path, config)
    example = Path(__file__).parents[2] / "examples" / "kimi-k2-int4-experts-fp8kv-8xh200.yaml"
    manifest = yaml.safe_load(example.read_text())
    manifest["spec"]["weights"] = {"format": "bf16"}
    manifest["spec"]["kvCache"] = {"dtype": "fp8_e4m3"}
    (tmp_path / "qm.yaml").write_text(yaml.safe_dump(manifest))
    assert (
        main(["render", "-f", str(tmp_path / "qm.yaml"), "--checkpoint", str(tmp_path / "config.json")]) == 2
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "the capacity plan starts no engine: no KV cache fits beside the weights" in err
    assert "use int4 weights, a larger tensorParallel, or bigger GPUs" in err
    # What one node cannot hold, the planner counts nodes for (tensor parallel across them).
    assert "would fit on 2 nodes of 8 such GPUs (tensorParallel 16 across them)" in err
    assert "multi-node serving, not built yet" in err
