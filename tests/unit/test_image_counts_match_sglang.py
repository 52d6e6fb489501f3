"""The tokens the gate reserves for an image part against what SGLang 0.5.23's own Qwen-VL processor
puts into the prompt for it.

`tests/sglang_image_counts.py` runs SGLang's multimodal path in SGLang's environment (its
QwenVLImageProcessor over transformers' processor, on an inline PNG of each size; no weights, no
network) and answers how many image tokens each image became. The gate's count
(`kvant_runtime.image_tokens`) must equal it for an inline image, read from the same PNG's header,
and the bound it reserves for a URL must cover every one. Two processor configurations: Qwen2.5-VL's
as it ships, and one with Qwen2-VL's lower ceiling, so the resize's floor, its ceiling and odd
aspect ratios are all crossed.

Needs SGLang's environment, which `make tools` builds: marked `cluster`, so `make unit` leaves it out.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from kvant_dev.toolchain import ENGINE_ENVIRONMENT, built_environment
from kvant_runtime.image_tokens import PREPROCESSOR_CONFIG, load_image_processor

pytestmark = pytest.mark.cluster

HARNESS = Path(__file__).resolve().parents[1] / "sglang_image_counts.py"
# Below the floor, odd sides and ratios, past the ceiling, and one SGLang refuses (ratio over 200).
SIZES = [(640, 480), (10, 10), (28, 28), (1921, 1079), (5000, 4000), (30, 5000), (56, 1064), (1, 300)]
LOWER_CEILING = 28 * 28 * 1280  # Qwen2-VL's max_pixels


def _engine_python() -> str:
    environment = built_environment(ENGINE_ENVIRONMENT)
    assert environment is not None, "SGLang's environment is not built: run `make tools`"
    return str(environment / "bin" / "python")


def _harness(*args: str, stdin: str = "") -> str:
    done = subprocess.run(
        [_engine_python(), str(HARNESS), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def _data_url(width: int, height: int) -> str:
    data = io.BytesIO()
    Image.new("RGB", (width, height), (10, 120, 60)).save(data, format="PNG")
    return "data:image/png;base64," + base64.b64encode(data.getvalue()).decode()


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vision")
    shipped = root / "qwen2.5-vl"
    _harness("--make-folder", str(shipped))
    lower = root / "lower-ceiling"
    _harness("--make-folder", str(lower))
    config = json.loads((lower / PREPROCESSOR_CONFIG).read_text())
    (lower / PREPROCESSOR_CONFIG).write_text(json.dumps({**config, "max_pixels": LOWER_CEILING}))
    return {"qwen2.5-vl": shipped, "lower-ceiling": lower}


@pytest.mark.parametrize("name", ["qwen2.5-vl", "lower-ceiling"])
def test_an_image_reserves_what_sglang_makes_of_it(folders: dict[str, Path], name: str) -> None:
    folder = folders[name]
    answers: list[dict[str, Any]] = json.loads(_harness(str(folder), stdin=json.dumps(SIZES)))
    processor = load_image_processor(folder)
    assert processor is not None and len(answers) == len(SIZES)
    counted = [a for a in answers if "tokens" in a]
    assert len(counted) == len(SIZES) - 1, answers  # all but the one SGLang refuses
    wrong = []
    for (width, height), answer in zip(SIZES, answers, strict=True):
        chat = {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": _data_url(width, height)}]}
            ]
        }
        ours = processor.reserve(chat)
        if "tokens" in answer and ours != answer["tokens"]:
            wrong.append(f"{width}x{height}: ours {ours}, SGLang {answer['tokens']}")
    assert not wrong, "\n".join(wrong)
    bound = processor.tokens(None)  # what an image URL reserves: at least any image's count
    assert all(a["tokens"] <= bound for a in counted), (bound, answers)
    assert max(a["tokens"] for a in counted) > bound // 2  # the bound is near what an image reaches
