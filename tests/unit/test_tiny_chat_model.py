"""The tiny chat model builds from text already on the machine, loads in transformers, counts tokens like
a real BPE tokenizer, and answers through its chat template with a natural EOS at varied lengths.

The first run trains it (a few minutes on two busy cores) into ${KVANT_CACHE:-~/.cache/kvant}/models;
later runs find it there.
"""

import json
import time

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from kvant_dev.tinychat import BOS_ID, EOS_ID, PAD_ID, ensure_tiny_chat_model
from kvant_runtime.tokens import estimate_text_tokens

# English prose that is not in the training text.
PARAGRAPH = (
    "Every spring the committee meets in the village hall to decide which roads need repairs first. "
    "The meeting usually runs late, because everyone has a favourite pothole and a story about how it "
    "damaged their bicycle, their car or, in one memorable case, a wedding cake on its way to the church."
)
PROMPTS = [
    "What is a list in Python?",
    "How does the for statement work?",
    "Tell me about the harbour in the morning.",
    "Explain what an exception is.",
    "What happens when a function is called?",
    "Describe the night train.",
    "What is a dictionary?",
    "How are strings formatted?",
    "What does the import statement do?",
    "Tell me about the garden.",
]
MAX_NEW_TOKENS = 256


@pytest.fixture(scope="module")
def model_dir():
    return ensure_tiny_chat_model()


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


def test_checkpoint_is_a_bf16_llama_with_chat_template_and_eos(model_dir):
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["dtype"] == "bfloat16"
    assert json.loads((model_dir / "generation_config.json").read_text())["eos_token_id"] == EOS_ID
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert "add_generation_prompt" in tokenizer_config["chat_template"]
    assert (model_dir / "model.safetensors").is_file()
    assert (model_dir / "tokenizer.json").is_file()


def test_tokenizer_counts_differ_clearly_from_bytes_over_four(tokenizer):
    special = (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
    assert special == (PAD_ID, BOS_ID, EOS_ID)
    assert 1000 <= len(tokenizer) <= 4096
    tokens = len(tokenizer.encode(PARAGRAPH, add_special_tokens=False))
    # Measured: 113 BPE tokens against 73 estimated (292 bytes / 4), a ratio of 1.55.
    assert 1.35 <= tokens / estimate_text_tokens(PARAGRAPH) <= 1.75
    assert tokenizer.decode(tokenizer.encode(PARAGRAPH, add_special_tokens=False)) == PARAGRAPH


def test_chat_template_renders_role_markers_and_generation_prompt(tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there."}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<s><|system|>\nBe brief.</s>\n<|user|>\nHello there.</s>\n<|assistant|>\n"
    without = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert not without.endswith("<|assistant|>\n")


def test_greedy_answers_end_with_eos_at_varied_lengths(model_dir, tokenizer):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    lengths = []
    for prompt in PROMPTS:
        messages = [{"role": "user", "content": prompt}]
        inputs = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        output = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
        answer = output[0, inputs["input_ids"].shape[1] :].tolist()
        lengths.append(answer.index(EOS_ID) + 1 if EOS_ID in answer else None)
    ended = [length for length in lengths if length is not None]
    assert len(ended) >= 6, f"answer lengths (None: no EOS in {MAX_NEW_TOKENS}): {lengths}"
    assert len(set(ended)) >= 3, f"answer lengths: {lengths}"


def test_second_call_returns_the_cached_folder_without_building(model_dir, capfd):
    before = (model_dir / "model.safetensors").stat().st_mtime_ns
    started = time.monotonic()
    assert ensure_tiny_chat_model() == model_dir
    assert time.monotonic() - started < 5
    assert (model_dir / "model.safetensors").stat().st_mtime_ns == before
    assert "tinychat.train" not in capfd.readouterr().err
