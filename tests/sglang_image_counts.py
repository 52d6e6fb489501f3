"""Image placeholder token counts for Qwen2.5-VL, computed by SGLang's own processor.

This is a test harness, not part of Kvant. It runs under SGLang's own Python
environment (the engine virtualenv with ``sglang`` 0.5.23), never under Kvant's:

    <engine python> tests/sglang_image_counts.py MODEL_DIR < sizes.json
    <engine python> tests/sglang_image_counts.py --make-folder DIR

stdin is a JSON list of ``[width, height]`` pairs. stdout is one JSON list with,
for each size, ``{"tokens": N}`` -- how many ``<|image_pad|>`` ids SGLang puts
into the prompt's input_ids for one image of that size -- or ``{"error": "..."}``
where SGLang's processor raises. MODEL_DIR holds what a Qwen2.5-VL repository
ships for processing (tokenizer files, preprocessor_config.json, config.json);
no weights. ``--make-folder DIR`` writes such a folder from nothing downloaded
(see ``make_model_folder``) and exits.

How the count is made. The objects are the ones ``TokenizerManager`` builds
for a multimodal model, made by SGLang's own functions on CPU:

* a real ``ServerArgs`` (model_path MODEL_DIR, device cpu) published with
  ``runtime_context.publish(..., role="tokenizer")``, so ``get_mm()`` /
  ``get_serving()`` / ``get_model()`` give SGLang's real defaults;
* ``ModelConfig.from_server_args`` (hf_config is transformers' Qwen2_5_VLConfig);
* the HF processor from ``tokenizer_manager.get_processor_wrapper()`` (SGLang's
  ``get_processor`` -> ``AutoProcessor.from_pretrained``, with its arguments);
* the multimodal processor from ``import_processors`` + ``get_mm_processor`` with
  ``determine_tensor_transport_mode()``, which resolves to QwenVLImageProcessor.

Each image is a PIL-made RGB PNG sent inline as ``data:image/png;base64,...``,
wrapped in ``ImageData(url=..., detail="auto")`` as the chat path does, inside a
real ``GenerateReqInput`` (normalized as ``TokenizerManager.generate_request``
does). ``process_mm_data_async`` is awaited with the same keywords the tokenizer
manager passes, on a prompt holding one ``<|vision_start|><|image_pad|><|vision_end|>``
(what Qwen's chat template renders for an image part), and the image token id is
counted in the returned input_ids. Nothing of SGLang's computation is redone here.

Off the GPU, two things differ from a server, neither touching the count: the
HF image processor gets no ``device`` kwarg (SGLang passes ``cuda:N`` on a GPU;
the resize arithmetic is the same), and the transport mode is only recorded.

No network: the Hugging Face hub is put in offline mode before any import.
"""

from __future__ import annotations

import os

# Before transformers / huggingface_hub / sglang are imported: never reach the hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import asyncio
import base64
import contextlib
import io
import json
import sys
import warnings
from pathlib import Path

# SGLang's import-time UserWarnings (no accelerator on this host) are noise here.
warnings.filterwarnings("ignore", category=UserWarning)

from PIL import Image  # noqa: E402
from sglang.srt.configs.model_config import ModelConfig  # noqa: E402
from sglang.srt.managers.io_struct import GenerateReqInput  # noqa: E402
from sglang.srt.managers.multimodal_processor import get_mm_processor, import_processors  # noqa: E402
from sglang.srt.managers.tokenizer_manager import get_processor_wrapper  # noqa: E402
from sglang.srt.multimodal.processors.qwen_vl import QwenVLImageProcessor  # noqa: E402
from sglang.srt.multimodal.transport import determine_tensor_transport_mode  # noqa: E402
from sglang.srt.runtime_context import publish  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.utils.common import ImageData  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

# What Qwen/Qwen2.5-VL-*-Instruct ships as preprocessor_config.json.
DEFAULT_PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
    "patch_size": 14,
    "merge_size": 2,
    "temporal_patch_size": 2,
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "rescale_factor": 0.00392156862745098,
    "resample": 3,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
}

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# A short Qwen2-VL-style template (an image part renders as the vision triple).
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

PROMPT = (
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>describe this picture"
    "<|im_end|>\n<|im_start|>assistant\n"
)


def make_model_folder(folder: Path, preprocessor: dict) -> None:
    """Write a weightless Qwen2.5-VL processing folder: tokenizer, config, preprocessor."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordLevel(unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = ["system user assistant describe this picture please .", "what is in the image ?"]
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=SPECIAL_TOKENS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)

    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    preprocessor = {**DEFAULT_PREPROCESSOR, **preprocessor}
    (folder / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2))
    config = {  # a tiny but well-formed Qwen2_5_VLConfig
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "vocab_size": tok.get_vocab_size(),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 4096,
        "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
        "torch_dtype": "bfloat16",
        "vision_config": {
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 64,
            "in_chans": 3,
            "patch_size": preprocessor["patch_size"],
            "spatial_merge_size": preprocessor["merge_size"],
            "temporal_patch_size": preprocessor["temporal_patch_size"],
            "tokens_per_second": 2,
            "window_size": 112,
            "fullatt_block_indexes": [0],
        },
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def _build_mm_processor(model_dir: str):
    """The QwenVLImageProcessor TokenizerManager.init_tokenizer_and_processor builds."""
    # device="cpu" keeps resolution from looking for an accelerator.
    server_args = ServerArgs(model_path=model_dir, device="cpu")
    publish(server_args, role="tokenizer")
    model_config = ModelConfig.from_server_args(server_args)
    import_processors("sglang.srt.multimodal.processors")
    processor = get_processor_wrapper()
    mm_processor = get_mm_processor(
        model_config.hf_config,
        server_args,
        processor,
        determine_tensor_transport_mode(),
        model_config=model_config,
    )
    if not isinstance(mm_processor, QwenVLImageProcessor):
        raise SystemExit(f"expected QwenVLImageProcessor, got {type(mm_processor).__name__}")
    return mm_processor


def _png_data_url(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (120, 30, 200)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


async def _count(mm_processor, width: int, height: int) -> dict:
    try:
        # As serving_chat builds it for one image_url part (jinja_template_utils).
        image = ImageData(url=_png_data_url(width, height), detail="auto")
        obj = GenerateReqInput(text=PROMPT, image_data=[image])
        obj.normalize_batch_and_arguments()
        # The keywords TokenizerManager._tokenize_one_request passes.
        out = await mm_processor.process_mm_data_async(
            image_data=obj.image_data,
            audio_data=obj.audio_data,
            input_text=PROMPT,
            request_obj=obj,
        )
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return {"tokens": list(out.input_ids).count(mm_processor.mm_tokens.image_token_id)}


async def _count_all(model_dir: str, sizes: list) -> list:
    mm_processor = _build_mm_processor(model_dir)
    try:
        return [await _count(mm_processor, int(w), int(h)) for w, h in sizes]
    finally:
        mm_processor.shutdown()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", nargs="?", help="Qwen2.5-VL processing folder")
    parser.add_argument("--make-folder", metavar="DIR", help="write a model folder to DIR and exit")
    args = parser.parse_args(argv)
    if args.make_folder:
        make_model_folder(Path(args.make_folder), DEFAULT_PREPROCESSOR)
        return 0
    if not args.model_dir:
        parser.error("MODEL_DIR is required")

    sizes = json.load(sys.stdin)
    if not isinstance(sizes, list) or not all(isinstance(s, list) and len(s) == 2 for s in sizes):
        raise SystemExit("stdin must be a JSON list of [width, height] pairs")
    # Anything SGLang prints goes to stderr; stdout carries only the answer.
    with contextlib.redirect_stdout(sys.stderr):
        results = asyncio.run(_count_all(os.path.abspath(args.model_dir), sizes))
    json.dump(results, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
