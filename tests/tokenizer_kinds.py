"""Small tokenizers of the kinds production models ship without a `tokenizer.json`, built at test time.

- `sentencepiece_folder`: a SentencePiece BPE model (`tokenizer.model`) named as a Llama tokenizer in
  `tokenizer_config.json`, the way Llama-2 and Mistral repositories ship it; transformers converts it.
- `tiktoken_folder`: a tiktoken encoding (`tiktoken.model`, base64 ranks, Kimi-K2's layout) behind the
  repository's own tokenizer class (`tokenization_tiny_tiktoken.py`, named in `auto_map`), so it
  loads only with `trust_remote_code`.

Both are trained here on the runtime's own texts (nothing downloaded), and take the role markers of
the tiny chat model as special tokens, so the corpus's templates render the same on every kind.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import re
from collections import Counter
from importlib import resources
from pathlib import Path

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
MARKERS = tuple(f"<|{role}|>" for role in ("system", "user", "assistant", "tool"))
VOCAB_SIZE = 600
# GPT-style pre-tokenization: words with their leading space, numbers, punctuation runs, spaces.
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+|\s+(?!\S)|\s+"""


def training_texts() -> list[str]:
    """The runtime's calibration and evaluation texts, line by line."""
    lines: list[str] = []
    for package in ("kvant_runtime.calibrate", "kvant_runtime.evaluate"):
        for entry in sorted(resources.files(package).joinpath("data").iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".txt"):
                lines += [line for line in entry.read_text().splitlines() if line.strip()]
    return lines


def sentencepiece_folder(folder: Path, chat_template: str) -> Path:
    import sentencepiece  # type: ignore[import-untyped]  # noqa: PLC0415 (the test kit only)

    folder.mkdir(parents=True)
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(training_texts()),
        model_writer=model,
        model_type="bpe",
        vocab_size=VOCAB_SIZE,
        byte_fallback=True,  # every character encodes, as in Llama's
        user_defined_symbols=list(MARKERS),
        character_coverage=1.0,
        minloglevel=2,
    )
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    config = {
        "tokenizer_class": "LlamaTokenizer",
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": UNK,
        "add_bos_token": True,
        "add_eos_token": False,
        "legacy": False,
        "chat_template": chat_template,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def tiktoken_folder(folder: Path, chat_template: str) -> Path:
    folder.mkdir(parents=True)
    ranks = _byte_pair_ranks(training_texts(), VOCAB_SIZE)
    (folder / "tiktoken.model").write_text(
        "".join(f"{base64.b64encode(token).decode()} {rank}\n" for token, rank in ranks.items())
    )
    (folder / "tokenization_tiny_tiktoken.py").write_text(REMOTE_TOKENIZER)
    config = {
        "tokenizer_class": "TinyTiktokenTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_tiny_tiktoken.TinyTiktokenTokenizer", None]},
        "bos_token": BOS,
        "eos_token": EOS,
        "chat_template": chat_template,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def _byte_pair_ranks(texts: list[str], size: int) -> dict[bytes, int]:
    """Byte-level BPE trained as tiktoken applies it: the 256 bytes, then each merge in the order
    learned (a lower rank merges first)."""
    words = Counter(
        tuple(bytes([b]) for b in piece.encode()) for text in texts for piece in re.findall(PATTERN, text)
    )
    ranks = {bytes([b]): b for b in range(256)}
    while len(ranks) < size:
        pairs: Counter[tuple[bytes, bytes]] = Counter()
        for word, count in words.items():
            for pair in itertools.pairwise(word):
                pairs[pair] += count
        if not pairs:
            break
        (left, right), _ = pairs.most_common(1)[0]
        ranks[left + right] = len(ranks)
        words = Counter({_merged(word, left, right): count for word, count in words.items()})
    return ranks


def _merged(word: tuple[bytes, ...], left: bytes, right: bytes) -> tuple[bytes, ...]:
    out: list[bytes] = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == left and word[i + 1] == right:
            out.append(left + right)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


# The repository's own tokenizer code, as Kimi-K2 ships `tokenization_kimi.py`: a tiktoken encoding
# behind transformers' Python tokenizer class. Runs only under trust_remote_code.
REMOTE_TOKENIZER = f'''"""A tiktoken encoding as a transformers tokenizer (the repository's own code)."""

import base64

import tiktoken
from transformers import PreTrainedTokenizer

PATTERN = {PATTERN!r}
SPECIALS = {[BOS, EOS, *MARKERS]!r}


class TinyTiktokenTokenizer(PreTrainedTokenizer):
    vocab_files_names = {{"vocab_file": "tiktoken.model"}}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file, **kwargs):
        ranks = {{}}
        with open(vocab_file, "rb") as lines:
            for line in lines:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        specials = {{token: len(ranks) + i for i, token in enumerate(SPECIALS)}}
        self.model = tiktoken.Encoding(
            "tiny", pat_str=PATTERN, mergeable_ranks=ranks, special_tokens=specials
        )
        self.decoder = {{rank: token.decode("latin-1") for token, rank in ranks.items()}}
        self.decoder.update({{rank: token for token, rank in specials.items()}})
        self.encoder = {{token: rank for rank, token in self.decoder.items()}}
        self.vocab_file = vocab_file
        kwargs.setdefault("additional_special_tokens", SPECIALS[2:])
        super().__init__(**kwargs)

    @property
    def vocab_size(self):
        return self.model.n_vocab

    def get_vocab(self):
        return dict(self.encoder)

    def _tokenize(self, text, **kwargs):
        return [self.decoder[rank] for rank in self.model.encode(text, disallowed_special=())]

    def _convert_token_to_id(self, token):
        return self.encoder[token]

    def _convert_id_to_token(self, index):
        return self.decoder[index]

    def convert_tokens_to_string(self, tokens):
        return b"".join(t.encode("latin-1") if t not in SPECIALS else t.encode() for t in tokens).decode(
            errors="replace"
        )

    def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
        bos = [self.bos_token_id] if self.bos_token_id is not None else []
        return bos + token_ids_0 + (token_ids_1 or [])

    def save_vocabulary(self, save_directory, filename_prefix=None):
        return (self.vocab_file,)
'''
