"""The prompt tokens an image part becomes in SGLang, reserved without fetching the image.

SGLang's `/v1/tokenize` (the gate's chat count, `gate/engine_count.py`) renders an image as its
template placeholder: the expansion into the image's own tokens happens only when a real request
reaches the engine's multimodal processor, which fetches and decodes the image first. The gate must
reserve those tokens before that, and must never fetch a URL itself (a gate that fetched what a
client names could be made to call anything its pod reaches). So it computes them from the model's
processor configuration (`preprocessor_config.json`, `processor_config.json`):

- Qwen-VL processors (Qwen2-VL, Qwen2.5-VL, Qwen3-VL: `Qwen2VLImageProcessor` and its fast twin):
  SGLang 0.5.23 hands a decoded image as it is to transformers' processor
  (`srt/multimodal/processors/qwen_vl.py`: only videos are resized first; newer SGLang resizes
  images too, within `SGLANG_IMAGE_MAX_PIXELS`), which resizes it within its `min_pixels` and
  `max_pixels` (or `size.shortest_edge`/`longest_edge`) to multiples of `patch_size · merge_size`;
  the image becomes one token per merged patch. For an inline image (a `data:` URL) the gate reads
  the size from the image's header and the count is exact; for a URL it reserves the most any image
  can become, `max_pixels / (patch_size · merge_size)²`. A server started with
  `--mm-processor-kwargs` that changes these bounds is not followed.
- processors with a fixed count (`image_seq_length`, as Gemma 3 and PaliGemma declare): that count.
- anything else: not known here, so nothing is added and the engine's reported count (the gate's
  forecast of held tokens) is what catches it; `load_image_processor` logs it once.

Past `MAX_IMAGES` images in one request the gate reads no more headers and reserves the most for each.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("kvant.tokens")

PREPROCESSOR_CONFIG = "preprocessor_config.json"
PROCESSOR_CONFIG = "processor_config.json"
QWEN_VL_PROCESSORS = frozenset({"Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast"})
# transformers' Qwen2VLImageProcessor defaults, where the configuration leaves them out.
QWEN_DEFAULTS = {"patch_size": 14, "merge_size": 2, "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 1280}
# Parts SGLang treats as images (request_cost.MEDIA_PART_TYPES holds video and audio too).
IMAGE_PARTS = frozenset({"image_url", "input_image"})
MAX_IMAGES = 64
MAX_ASPECT = 200  # the processor refuses a longer side over 200 times the shorter


@dataclass(frozen=True)
class ImageProcessor:
    """How many tokens an image of a given size becomes for one model."""

    name: str
    factor: int = 0  # qwen-vl: patch_size * merge_size
    min_pixels: int = 0
    max_pixels: int = 0
    fixed: int = 0  # a fixed count per image, where the processor declares one

    def tokens(self, size: tuple[int, int] | None) -> int:
        """The tokens of an image of `size` (width, height); None: of any image (the most)."""
        if self.fixed:
            return self.fixed
        if size is None or min(size) <= 0:
            return self.max_pixels // (self.factor * self.factor)
        width, height = size
        try:
            height, width = _resize(height, width, self.factor, self.min_pixels, self.max_pixels)
        except ValueError:  # an aspect ratio the processor refuses: the engine answers it
            return self.max_pixels // (self.factor * self.factor)
        return (height // self.factor) * (width // self.factor)

    def reserve(self, payload: dict[str, Any]) -> int:
        """The tokens the request's image parts become, beyond what the prompt count holds."""
        parts = image_parts(payload)
        read = sum(self.tokens(inline_image_size(url)) for url in parts[:MAX_IMAGES])
        return read + self.tokens(None) * len(parts[MAX_IMAGES:])


def load_image_processor(folder: Path | None) -> ImageProcessor | None:
    """The model's image processor, or None for a model that reads only text."""
    if folder is None:
        return None
    config = {**_read(folder / PROCESSOR_CONFIG), **_read(folder / PREPROCESSOR_CONFIG)}
    if not config:
        return None
    name = str(config.get("image_processor_type") or config.get("processor_class") or "unknown")
    fixed = config.get("image_seq_length")
    if isinstance(fixed, int) and not isinstance(fixed, bool) and fixed > 0:
        return ImageProcessor(name, fixed=fixed)
    if name in QWEN_VL_PROCESSORS:
        return _qwen_vl(name, config)
    log.warning("event=image_tokens_unknown processor=%s (image parts reserve their placeholder only)", name)
    return None


def image_parts(payload: dict[str, Any]) -> list[str]:
    """The URL (or `data:` URL) of every image part of a chat or Responses request, in order."""
    found: list[str] = []
    for message in _messages(payload):
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") in IMAGE_PARTS:
                value = part.get("image_url")
                url = value.get("url") if isinstance(value, dict) else value
                found.append(url if isinstance(url, str) else "")
    return found


def inline_image_size(url: str) -> tuple[int, int] | None:
    """(width, height) of a `data:` URL's image, read from its header; None for anything else (a URL
    is never fetched) or an image that cannot be read (the engine refuses it)."""
    if not url.startswith("data:") or "," not in url:
        return None
    header, data = url.split(",", 1)
    if not header.endswith(";base64"):
        return None
    from PIL import Image  # noqa: PLC0415 (only a model that reads images needs it)

    try:
        raw = base64.b64decode(data, validate=False)
        with Image.open(io.BytesIO(raw)) as image:  # reads the header, not the pixels
            return int(image.size[0]), int(image.size[1])
    except (binascii.Error, ValueError, OSError, Image.DecompressionBombError):
        return None


def _qwen_vl(name: str, config: dict[str, Any]) -> ImageProcessor:
    values = {**QWEN_DEFAULTS, **{k: v for k, v in config.items() if k in QWEN_DEFAULTS}}
    found = config.get("size")
    size: dict[str, Any] = found if isinstance(found, dict) else {}
    min_pixels = int(size.get("shortest_edge") or values["min_pixels"])
    max_pixels = int(size.get("longest_edge") or values["max_pixels"])
    if "min_pixels" in config:  # the older keys win over size, as transformers reads them
        min_pixels = int(config["min_pixels"])
    if "max_pixels" in config:
        max_pixels = int(config["max_pixels"])
    factor = int(values["patch_size"]) * int(values["merge_size"])
    return ImageProcessor(name, factor, min_pixels, max_pixels)


def _resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers' Qwen-VL resize rule: sides to multiples of `factor`, the area within
    [min_pixels, max_pixels], the aspect kept."""
    if max(height, width) / min(height, width) > MAX_ASPECT:
        raise ValueError(f"aspect ratio over {MAX_ASPECT}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _messages(payload: dict[str, Any]) -> list[Any]:
    messages = payload.get("messages")
    if isinstance(messages, list):
        return messages
    value = payload.get("input")  # Responses API: a list of message-like items
    return value if isinstance(value, list) else []


def _read(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
