"""Prompt tokens counted as the engine counts them: the model's tokenizer and chat template where the
served folder has them (checked against transformers, whose tokenizer SGLang runs), the bytes estimate
with a learned correction where it has none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from kvant_dev.tinychat import ensure_tiny_chat_model
from kvant_runtime.prompt_counter import ByteEstimate, ModelTokenizer, load_counter
from kvant_runtime.request_cost import cost_request
from kvant_runtime.tokenizer_files import LONG_TEXT_CHARS, TokenizerError
from tests.tokenizer_kinds import sentencepiece_folder, tiktoken_folder

TEXTS = [
    "The harbour wakes before the town does.",
    "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}\n",
    "Ünïcödé text, emoji 🚀 and CJK 漢字 mixed in.",
    "",
]
CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "How do I build a bookshelf?"}],
    [
        {"role": "system", "content": "You are brief."},
        {"role": "user", "content": "Name a fish."},
        {"role": "assistant", "content": "Hake."},
        {"role": "user", "content": [{"type": "text", "text": "Another one?"}]},
    ],
]


@pytest.fixture(scope="module")
def model() -> Path:
    return ensure_tiny_chat_model()


def test_text_is_counted_as_the_models_tokenizer_counts_it(model):
    reference = AutoTokenizer.from_pretrained(model)
    counter = ModelTokenizer(model)
    assert len(TEXTS) >= 3, "no texts to count"
    for text in TEXTS:
        assert counter.text(text) == len(reference.encode(text)), text


def test_chat_is_counted_through_the_models_template(model):
    reference = AutoTokenizer.from_pretrained(model)
    counter = ModelTokenizer(model)
    for messages in CONVERSATIONS[:1]:  # plain string contents: the template's own input
        # As apply_chat_template(tokenize=True) does: render, then encode without special tokens.
        text = reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert isinstance(text, str)
        assert counter.chat({"messages": messages}) == len(reference.encode(text, add_special_tokens=False))
    assert counter.chat({"messages": CONVERSATIONS[1]}) > counter.chat({"messages": CONVERSATIONS[0]})


def test_the_bytes_estimate_is_far_from_a_small_vocabulary(model):
    """Why the gate needs the tokenizer: on this model's prose bytes/4 is off by a large factor."""
    prose = (
        "Our neighbour keeps bees at the bottom of her orchard. Every autumn she brings us a jar of dark "
        "honey and a list of complaints about the weather, the wasps and the council's new bins."
    )
    exact, estimate = ModelTokenizer(model).text(prose), ByteEstimate().text(prose)
    assert exact > 1.3 * estimate or exact < 0.75 * estimate, (exact, estimate)


def test_the_gate_costs_requests_with_the_counter(model):
    counter = ModelTokenizer(model)
    body = json.dumps({"text": TEXTS[0], "sampling_params": {"max_new_tokens": 10}}).encode()
    cost = cost_request("/generate", body, 256, counter)
    assert (cost.prompt_tokens, cost.counted) == (counter.text(TEXTS[0]), True)
    ids = json.dumps({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 10}}).encode()
    assert cost_request("/generate", ids, 256, counter).counted is False  # token ids count themselves


def test_the_estimate_learns_the_engines_counts():
    estimate = ByteEstimate()
    text = "x" * 400  # 100 tokens by bytes/4
    for _ in range(200):
        estimate.learn(estimate.text(text), 200)  # the engine reports twice as many
    assert estimate.text(text) == pytest.approx(200, rel=0.05)
    for _ in range(50):
        estimate.learn(estimate.text(text), 100_000)  # an absurd report moves it only to the bound
    assert estimate.scales["text"] <= 4.0


def test_the_estimate_learns_each_request_shape_apart():
    estimate = ByteEstimate()
    chat = {"messages": [{"role": "user", "content": "y" * 400}]}
    before = estimate.chat(chat)
    for _ in range(200):
        estimate.learn(estimate.chat(chat), 3 * before, "chat")  # a template three times the bytes
    assert estimate.chat(chat) == pytest.approx(3 * before, rel=0.05)
    assert estimate.scales["text"] == 1.0 and estimate.text("x" * 400) == 100  # prose untouched
    estimate.learn(100, 100, "audio")  # a shape it does not know is ignored, not a new key
    assert set(estimate.scales) == {"text", "chat"}


def test_a_folder_without_a_tokenizer_estimates_and_a_broken_one_is_named(tmp_path, model):
    assert isinstance(load_counter(None), ByteEstimate)
    assert isinstance(load_counter(tmp_path), ByteEstimate)
    broken = tmp_path / "broken"
    shutil.copytree(model, broken)
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match=r"tokenizer.json"):
        load_counter(broken)


def test_a_long_prompt_is_counted_alike_off_the_gil(model):
    """Long texts take the GIL-releasing path; the count must not change with the path."""
    counter = ModelTokenizer(model)
    long_text = TEXTS[0] * 200  # above LONG_TEXT_CHARS
    assert len(long_text) > LONG_TEXT_CHARS
    reference = AutoTokenizer.from_pretrained(model)
    assert counter.text(long_text) == len(reference.encode(long_text))


def test_a_sentencepiece_folder_without_tokenizer_json_is_counted_exactly(tmp_path):
    """Llama-2-style: tokenizer.model only. Loaded as SGLang loads it (AutoTokenizer), not estimated."""
    folder = sentencepiece_folder(tmp_path / "sp", "{{ bos_token }}{{ messages[0]['content'] }}")
    counter = load_counter(folder)
    assert isinstance(counter, ModelTokenizer)
    reference = AutoTokenizer.from_pretrained(folder)
    for text in TEXTS:
        assert counter.text(text) == len(reference.encode(text))  # with its BOS, as the engine counts
    long_text = TEXTS[0] * 200
    assert counter.text(long_text) == len(reference.encode(long_text))


def test_a_repositorys_own_tokenizer_code_runs_only_where_the_engine_trusts_it(tmp_path):
    """Kimi-K2-style: a tiktoken encoding behind the repository's tokenizer class (auto_map)."""
    folder = tiktoken_folder(tmp_path / "tiktoken", "{{ messages[0]['content'] }}")
    with pytest.raises(TokenizerError, match=r"--trust-remote-code"):
        load_counter(folder)  # the engine would not load it either without the flag
    counter = load_counter(folder, trust_remote_code=True)
    assert isinstance(counter, ModelTokenizer)
    reference = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    for text in TEXTS:
        assert counter.text(text) == len(reference.encode(text))
    assert counter.text(TEXTS[0]) < ByteEstimate().text(TEXTS[0]) * 2  # a real vocabulary, not bytes
    assert counter.chat({"messages": [{"role": "user", "content": TEXTS[1]}]}) == len(
        reference.encode(TEXTS[1], add_special_tokens=False)
    )
