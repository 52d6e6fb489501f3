"""A tiny chat model worth serving: trained here, in about a minute on two CPU cores, from nothing downloaded.

`kvant_dev.tinymodel` makes random-weight checkpoints: they load anywhere, but they never stop talking,
and their byte-per-token tokenizer makes every token count equal the byte count. This module makes the one
small model whose *behaviour* matters, for tests and demos that need realistic requests:

- a real byte-level BPE tokenizer (`tokenizers`, 2048 entries), so token counts differ from the gate's
  one-token-per-4-bytes estimate (`kvant_runtime.tokens`) the way a real model's do;
- a Llama GQA model (the `tinymodel` shapes, 2048 positions) trained on chat-formatted text, so greedy or
  sampled answers end with a natural EOS after a sentence or a paragraph, at varied lengths;
- a chat template with role markers (see `CHAT_TEMPLATE`) and a generation prompt, in tokenizer_config.json.

The text is what every machine already has: CPython's own `pydoc_data.topics` (the language reference
that `help()` shows: about 460 KB of English prose with some code, in every CPython install) and the
texts shipped in this package for calibration and evaluation (`calibrate/data`, `evaluate/data`). Nothing
is downloaded, and the model is a pure function of that text, this file and the pinned library versions.

`ensure_tiny_chat_model()` builds it once into `${KVANT_CACHE:-~/.cache/kvant}/models/tinychat-<key>`
(key: this file, the library versions and the text) and returns that folder from then on. A file lock
makes concurrent test processes build it once; the build happens in a temporary folder beside the final
one and is renamed into place, so a folder under its final name is always complete.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.resources
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from pydoc_data.topics import topics as pydoc_topics
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

from kvant_dev.tinymodel import _GQA

# Special tokens first, so their ids are fixed: pad 0, bos 1, eos 2, then the role markers.
PAD, BOS, EOS = "<pad>", "<s>", "</s>"
ROLES = ("system", "user", "assistant")
SPECIAL_TOKENS = (PAD, BOS, EOS, *(f"<|{role}|>" for role in ROLES))
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
VOCAB_SIZE = 2048
# Every message is `<|role|>` newline content `</s>` newline; the prompt ends with `<|assistant|>` newline.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
CONFIG: dict[str, Any] = {**_GQA, "intermediate_size": 384, "max_position_embeddings": 2048}

# Answers are whole sentences, up to the end of their paragraph, between these token counts.
_MIN_ANSWER_TOKENS, _MAX_ANSWER_TOKENS = 5, 120
_MAX_EXAMPLE_TOKENS = 256
_SYSTEM_PROMPTS = ("You are a helpful assistant.", "Answer briefly.", "You explain Python.")
_SEED = 0
_STEPS = 400
_BATCH = 16
_PEAK_LR = 3e-3
_WARMUP_STEPS = 30
_LOG_EVERY = 50
_LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“(])")
_RULE = re.compile(r"^[*=\-~^]+$")


def ensure_tiny_chat_model(cache_root: Path | None = None) -> Path:
    """Returns the tiny chat model's folder, building it first (about two minutes) if it is not cached.

    `cache_root` defaults to `$KVANT_CACHE` or `~/.cache/kvant`; the model lives in its `models/` folder.
    """
    root = Path(cache_root) if cache_root is not None else _default_cache_root()
    models_dir = root / "models"
    texts = _corpus_texts()
    final = models_dir / f"tinychat-{_cache_key(texts)}"
    if (final / "config.json").is_file():
        return final
    models_dir.mkdir(parents=True, exist_ok=True)
    with _locked(models_dir / f"{final.name}.lock"):
        if (final / "config.json").is_file():  # another process built it while we waited
            return final
        building = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=models_dir))
        try:
            _build(building, texts)
            # mkdtemp and safetensors make owner-only files; readers (a served model's pod) may be others.
            building.chmod(0o755)
            for file in building.iterdir():
                file.chmod(0o644)
            os.rename(building, final)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    _log("tinychat.ready", path=final)
    return final


def _default_cache_root() -> Path:
    return Path(os.environ.get("KVANT_CACHE", Path.home() / ".cache" / "kvant"))


def _corpus_texts() -> list[str]:
    """The training text, in a fixed order: the pydoc topics by name, then the package's data files."""
    texts = [pydoc_topics[name] for name in sorted(pydoc_topics)]
    package = importlib.resources.files("kvant_runtime")
    for folder in ("calibrate/data", "evaluate/data"):
        files = sorted(package.joinpath(folder).iterdir(), key=lambda entry: entry.name)
        texts += [entry.read_text(encoding="utf-8") for entry in files if entry.name.endswith(".txt")]
    return texts


def _cache_key(texts: list[str]) -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for library in _LIBRARIES:
        digest.update(f"\0{library}=={importlib.metadata.version(library)}".encode())
    for text in texts:
        digest.update(b"\0" + text.encode("utf-8"))
    return digest.hexdigest()[:12]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def _one_thread() -> Iterator[None]:
    """Trains on one thread: the sums then add up in one order on any machine, and a busy two-core
    machine (where two threads mostly wait on each other) trains several times faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _log(event: str, **fields: object) -> None:
    line = " ".join([f"event={event}", *(f"{key}={value}" for key, value in fields.items())])
    print(line, file=sys.stderr, flush=True)


def _build(out: Path, texts: list[str]) -> None:
    started = time.monotonic()
    tokenizer = _train_tokenizer(texts)
    _save_tokenizer(tokenizer, out)
    _log("tinychat.tokenizer", vocab=len(tokenizer), seconds=f"{time.monotonic() - started:.1f}")
    examples = _chat_examples(tokenizer, texts)
    config = AutoConfig.for_model("llama", vocab_size=len(tokenizer), **CONFIG)
    config.bos_token_id, config.eos_token_id, config.pad_token_id = BOS_ID, EOS_ID, PAD_ID
    torch.manual_seed(_SEED)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    with _one_thread():
        loss = _train(model, examples)
    model.to(torch.bfloat16).save_pretrained(out)
    generation = GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)  # type: ignore[no-untyped-call]
    generation.save_pretrained(out)
    _log("tinychat.built", loss=f"{loss:.3f}", seconds=f"{time.monotonic() - started:.1f}")


def _train_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer)
    ids = [backend.token_to_id(token) for token in SPECIAL_TOKENS]
    if ids[:3] != [PAD_ID, BOS_ID, EOS_ID]:
        raise RuntimeError(f"tokenizer special token ids are {ids}, expected pad 0, bos 1, eos 2 first")
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        model_max_length=CONFIG["max_position_embeddings"],
    )


def _save_tokenizer(tokenizer: PreTrainedTokenizerFast, out: Path) -> None:
    """Saves with the chat template inside tokenizer_config.json and the class name every transformers
    release (and so every SGLang image) knows. The role markers are special in tokenizer.json itself."""
    tokenizer.save_pretrained(out, save_jinja_files=False)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def _paragraphs(text: str) -> Iterator[list[str]]:
    """The prose paragraphs of `text` as lists of sentences: no code, grammar, tables or headings."""
    for block in re.split(r"\n\s*\n", text):
        lines = block.strip("\n").splitlines()
        if not lines or any(_RULE.match(line.strip()) for line in lines):
            continue
        first = lines[0].lstrip()
        indented = lines[0] != first
        if first.startswith("* "):
            first = first[2:]
        elif indented:  # code blocks and grammar rules are indented in the pydoc text
            continue
        prose = " ".join([first, *(line.strip() for line in lines[1:])])
        letters = sum(char.isalpha() or char == " " for char in prose)
        if len(prose) < 40 or letters < 0.85 * len(prose) or prose[-1] not in ".!?:":
            continue
        yield _SENTENCE_END.split(prose)


def _chat_examples(tokenizer: PreTrainedTokenizerFast, texts: list[str]) -> list[list[int]]:
    """Token ids of chat conversations: the user says a sentence, the assistant continues the text.

    The answer is the sentences that follow, up to the end of their paragraph (the next paragraph when
    the user's sentence ends one), fewer if that passes `_MAX_ANSWER_TOKENS`. So EOS always follows a
    sentence end, where a paragraph ends, and answers vary in length.
    """
    rng = random.Random(_SEED)
    conversations: list[list[dict[str, str]]] = []
    for text in texts:
        paragraphs = list(_paragraphs(text))
        for number, sentences in enumerate(paragraphs):
            following = paragraphs[number + 1] if number + 1 < len(paragraphs) else []
            for i, sentence in enumerate(sentences):
                answer = _answer(tokenizer, sentences[i + 1 :] or following)
                if not answer:
                    continue
                messages = [{"role": "user", "content": sentence}, {"role": "assistant", "content": answer}]
                if rng.random() < 0.2:
                    messages.insert(0, {"role": "system", "content": rng.choice(_SYSTEM_PROMPTS)})
                conversations.append(messages)
    rendered = [tokenizer.apply_chat_template(messages, tokenize=False) for messages in conversations]
    encodings = tokenizer.backend_tokenizer.encode_batch(
        [str(text) for text in rendered], add_special_tokens=False
    )
    # The template ends each message with EOS and a newline; an example ends at the answer's EOS.
    examples = [
        encoding.ids[: len(encoding.ids) - encoding.ids[::-1].index(EOS_ID)] for encoding in encodings
    ]
    _log("tinychat.examples", count=len(examples), tokens=sum(map(len, examples)))
    return examples


def _answer(tokenizer: PreTrainedTokenizerFast, sentences: list[str]) -> str:
    """The leading `sentences` that fit in `_MAX_ANSWER_TOKENS`, or "" if under `_MIN_ANSWER_TOKENS`."""
    answer = ""
    for sentence in sentences:
        candidate = f"{answer} {sentence}" if answer else sentence
        if len(tokenizer.encode(candidate, add_special_tokens=False)) > _MAX_ANSWER_TOKENS:
            break
        answer = candidate
    return answer if len(tokenizer.encode(answer, add_special_tokens=False)) >= _MIN_ANSWER_TOKENS else ""


def _train(model: torch.nn.Module, examples: list[list[int]]) -> float:
    """Trains for a fixed number of steps (so the result is deterministic); returns the final loss.

    Batches hold examples of similar length (little padding); their order is shuffled each epoch.
    """
    rng = random.Random(_SEED)
    order = sorted(range(len(examples)), key=lambda i: (len(examples[i]), i))
    batches = [order[i : i + _BATCH] for i in range(0, len(order), _BATCH)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=_PEAK_LR, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    recent: list[float] = []
    started = time.monotonic()
    for step in range(_STEPS):
        if step % len(batches) == 0:
            rng.shuffle(batches)
        rows = [examples[i] for i in batches[step % len(batches)]]
        width = max(map(len, rows))
        input_ids = torch.tensor([row + [PAD_ID] * (width - len(row)) for row in rows])
        attention_mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(step)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        recent = [*recent[-(_LOG_EVERY - 1) :], loss.item()]
        if (step + 1) % _LOG_EVERY == 0 or step + 1 == _STEPS:
            mean = sum(recent) / len(recent)
            elapsed = time.monotonic() - started
            _log("tinychat.train", step=step + 1, of=_STEPS, loss=f"{mean:.3f}", seconds=f"{elapsed:.1f}")
    model.eval()
    return sum(recent) / len(recent)


def _learning_rate(step: int) -> float:
    """Linear warm-up, then a cosine decay to a tenth of the peak."""
    if step < _WARMUP_STEPS:
        return _PEAK_LR * (step + 1) / _WARMUP_STEPS
    progress = (step - _WARMUP_STEPS) / max(1, _STEPS - _WARMUP_STEPS)
    return _PEAK_LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
