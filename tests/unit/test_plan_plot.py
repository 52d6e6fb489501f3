"""`kvant plan --plot FILE`: the planner's own numbers, drawn as a PNG; clean errors when it cannot be."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from kvant_cli.main import main
from kvant_contracts.kv_dtypes import KvCacheDtype
from kvant_operator.api.spec import WeightFormat
from kvant_operator.planner.capacity import GIB
from kvant_operator.planner.capacity_plan import PlanRequest, make_plan
from kvant_operator.planner.checkpoint_view import load_checkpoint
from kvant_operator.planner.plan_plot import INSTALL_HINT, capacity_panels
from tests.unit.planner_configs import deepseek_v3, write_config

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
REQUEST = PlanRequest(gpu_memory_gib=141, tensor_parallel=8, weights_format=WeightFormat.INT4, group_size=32)


def plan_args(config: Path, *extra: str) -> list[str]:
    return [
        "plan",
        "--config",
        str(config),
        "--tp",
        "8",
        "--gpu-memory-gib",
        "141",
        "--weights",
        "int4",
        *extra,
    ]


def test_plotted_numbers_are_the_planners(tmp_path: Path):
    checkpoint = load_checkpoint(write_config(tmp_path, deepseek_v3()))
    kv_tokens, concurrency, weights = capacity_panels(checkpoint, REQUEST)
    bf16 = make_plan(checkpoint, replace(REQUEST, kv_cache_dtype=KvCacheDtype.BF16))
    fp8 = make_plan(checkpoint, replace(REQUEST, kv_cache_dtype=KvCacheDtype.FP8_E4M3))

    assert kv_tokens.series == {
        "bf16 KV": [bf16.kv_tokens_per_replica],
        "fp8_e4m3 KV": [fp8.kv_tokens_per_replica],
    }
    # One byte per KV element instead of two: the same memory holds twice the tokens.
    assert fp8.kv_tokens_per_replica == pytest.approx(2 * bf16.kv_tokens_per_replica, abs=1)
    assert concurrency.groups == [f"{c:,}" for c in REQUEST.contexts]
    assert concurrency.series["bf16 KV"] == [bf16.max_concurrency[c] for c in REQUEST.contexts]
    assert concurrency.series["fp8_e4m3 KV"] == [fp8.max_concurrency[c] for c in REQUEST.contexts]

    source = make_plan(checkpoint, replace(REQUEST, weights_format=None))
    assert weights.groups == ["fp8 (source)", "int4"]
    assert weights.series == {"weights": [source.weight_bytes_per_gpu / GIB, bf16.weight_bytes_per_gpu / GIB]}
    assert weights.series["weights"][1] < weights.series["weights"][0]
    assert weights.guide == ("GPU memory", 141)


def test_plot_is_a_png_and_stdout_stays_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    config = write_config(tmp_path / "model", deepseek_v3())
    png = tmp_path / "plan.png"
    assert main(plan_args(config, "--json", "--plot", str(png))) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["kv_cache_dtype"] == "fp8_e4m3"
    assert err.strip() == f"kvant plan: wrote {png}"

    assert png.read_bytes()[:8] == PNG_SIGNATURE
    with Image.open(png) as image:
        assert image.format == "PNG"
        width, height = image.size
    assert 600 <= width <= 2000 and 250 <= height <= 1000 and width > height
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "plan.png"]  # no temp file left


def test_plot_replaces_an_earlier_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    config = write_config(tmp_path / "model", deepseek_v3())
    png = tmp_path / "plan.png"
    png.write_bytes(b"an older plot")
    assert main(plan_args(config, "--plot", str(png))) == 0
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    assert "KV tokens per replica" in capsys.readouterr().out  # the table still prints


@pytest.mark.parametrize(
    ("target", "message"),
    [("missing/plan.png", "does not exist"), (".", "is a folder")],
)
def test_bad_plot_path_is_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, message: str
):
    config = write_config(tmp_path / "model", deepseek_v3())
    assert main(plan_args(config, "--plot", str(tmp_path / target))) == 2
    out, err = capsys.readouterr()
    assert out == ""  # refused before any plan was printed
    assert err.startswith("kvant plan: --plot ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_without_matplotlib_the_error_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    # None in sys.modules makes `import matplotlib...` fail as if it were not installed.
    for name in [m for m in sys.modules if m.split(".")[0] == "matplotlib"] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)
    config = write_config(tmp_path / "model", deepseek_v3())
    assert main(plan_args(config, "--plot", str(tmp_path / "plan.png"))) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvant plan: --plot needs matplotlib") and INSTALL_HINT in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "plan.png").exists()


def test_the_cli_loads_matplotlib_only_to_plot():
    probe = (
        "import sys, kvant_cli.main, kvant_operator.planner.plan_command; print('matplotlib' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
