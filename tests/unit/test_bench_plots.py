"""bench/plots.py draws the benches' own rows as PNGs (the benches run for minutes; their helper does not)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.plots import batch_by_concurrency, goodput_by_load
from PIL import Image


@dataclass
class Point:  # the fields of bench/engine_sim's Point that the plot reads
    concurrency: int
    output_tokens_per_s: float
    mean_running: float


def assert_png(path: Path, panels: int) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        width, height = image.size
    assert width >= 350 * panels and 250 <= height <= 600


def test_protection_rows_become_a_panel_per_kv_dtype(tmp_path: Path):
    def cell(goodput: float) -> dict[str, float]:
        return {"goodput": goodput, "retractions": 0, "rate429": 0.0, "completed": 10, "late": 0}

    rows = [
        {"kv": kv, "load": load, "off": cell(400 / load), "worstCase": cell(400), "ratios": {}}
        for kv in ("bf16", "fp8_e4m3")
        for load in (1, 2, 4)
    ]
    png = goodput_by_load(rows, ["off", "worstCase"], tmp_path / "goodput.png", "two rows a mode")
    assert_png(png, panels=2)


def test_sweep_curves_become_batch_and_throughput_panels(tmp_path: Path):
    curves = {
        "bf16": [Point(1, 90, 1.0), Point(32, 650, 31.0), Point(64, 655, 31.1)],
        "fp8_e4m3": [Point(1, 91, 1.0), Point(32, 770, 29.2), Point(64, 877, 57.5)],
    }
    png = batch_by_concurrency(curves, tmp_path / "batch.png", "three points a curve")
    assert_png(png, panels=2)
