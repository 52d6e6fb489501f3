"""The tokens an image part becomes, from the model's processor configuration: held to transformers' own
Qwen-VL image processor, which SGLang 0.5.23's multimodal processor hands each decoded image to as it
is, on images made here; SGLang's whole path is held in test_image_counts_match_sglang.py."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image
from transformers import AutoImageProcessor

from kvant_runtime.image_tokens import (
    MAX_IMAGES,
    ImageProcessor,
    image_parts,
    inline_image_size,
    load_image_processor,
)
from kvant_runtime.request_cost import cost_request

QWEN25_VL = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "patch_size": 14,
    "merge_size": 2,
    "temporal_patch_size": 2,
    "min_pixels": 3136,
    "max_pixels": 12845056,
}
QWEN3_VL = {  # 16-pixel patches, the bounds as `size`
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "patch_size": 16,
    "merge_size": 2,
    "temporal_patch_size": 2,
    "size": {"shortest_edge": 65536, "longest_edge": 16777216},
}
QWEN2_VL = {"image_processor_type": "Qwen2VLImageProcessor"}  # every default: 1,003,520 pixels at most
# Below the floor, odd ratios and sides, past the ceiling.
SIZES = [(10, 10), (28, 28), (56, 1064), (640, 480), (1921, 1079), (3584, 2016), (5000, 4000), (30, 5000)]


def _folder(tmp_path: Path, config: dict[str, object]) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    return folder


def _data_url(width: int, height: int) -> str:
    data = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(data, format="PNG")
    return "data:image/png;base64," + base64.b64encode(data.getvalue()).decode()


@pytest.mark.parametrize(
    "config", [QWEN25_VL, QWEN3_VL, QWEN2_VL], ids=["qwen2.5-vl", "qwen3-vl", "qwen2-vl"]
)
def test_each_image_becomes_what_the_models_processor_makes_of_it(tmp_path, config):
    folder = _folder(tmp_path, config)
    ours = load_image_processor(folder)
    assert ours is not None
    theirs = AutoImageProcessor.from_pretrained(folder)
    merge = int(str(config.get("merge_size", 2)))
    for width, height in SIZES:
        grid = theirs(images=[Image.new("RGB", (width, height))], return_tensors="pt")["image_grid_thw"][0]
        assert ours.tokens((width, height)) == int(grid.prod()) // merge**2, (width, height)
        assert ours.tokens((width, height)) <= ours.tokens(None)  # a URL's bound covers every image


def test_an_inline_images_size_is_read_from_its_header_and_a_url_is_not_touched():
    assert inline_image_size(_data_url(321, 123)) == (321, 123)
    assert inline_image_size("https://example.invalid/cat.png") is None
    assert inline_image_size("data:image/png;base64,not-an-image") is None
    assert inline_image_size("data:text/plain,hello") is None


def test_image_parts_are_found_in_chat_and_responses_requests():
    chat = {
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a"}}, "x"]},
            {"role": "user", "content": "no parts"},
        ]
    }
    responses = {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "b"}]}]}
    assert image_parts(chat) == ["a"]
    assert image_parts(responses) == ["b"]


def test_a_fixed_count_processor_and_an_unknown_one(tmp_path):
    gemma = tmp_path / "gemma"
    gemma.mkdir()
    (gemma / "preprocessor_config.json").write_text(
        json.dumps({"image_processor_type": "Gemma3ImageProcessor"})
    )
    (gemma / "processor_config.json").write_text(json.dumps({"image_seq_length": 256}))
    processor = load_image_processor(gemma)
    assert processor is not None and processor.tokens((4000, 10)) == processor.tokens(None) == 256
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "preprocessor_config.json").write_text(json.dumps({"image_processor_type": "SomeProcessor"}))
    assert load_image_processor(unknown) is None
    assert load_image_processor(tmp_path / "nothing") is None


def test_the_request_is_costed_with_its_images(tmp_path):
    processor = load_image_processor(_folder(tmp_path, QWEN25_VL))
    assert isinstance(processor, ImageProcessor)
    parts = [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": _data_url(644, 476)}}]
    body = json.dumps({"messages": [{"role": "user", "content": parts}], "max_tokens": 5}).encode()
    plain = cost_request("/v1/chat/completions", body, 64, engine_counts=[30])
    pictured = cost_request("/v1/chat/completions", body, 64, engine_counts=[30], images=processor)
    assert pictured.prompt_tokens == plain.prompt_tokens + 17 * 23  # 476 x 644 in 28-pixel patches
    # Past MAX_IMAGES no header is read: each further image is reserved at the most it can become.
    many = {"messages": [{"role": "user", "content": [parts[1]] * (MAX_IMAGES + 2)}]}
    assert processor.reserve(many) == MAX_IMAGES * 17 * 23 + 2 * processor.tokens(None)
