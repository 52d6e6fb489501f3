"""A model folder's tokenizer, loaded the way SGLang loads it, behind the three calls a counter needs.

SGLang 0.5.23 loads every tokenizer with transformers' `AutoTokenizer.from_pretrained` (its
`get_tokenizer`, tokenizer mode "auto"): a folder's `tokenizer.json` becomes a fast tokenizer, a
SentencePiece `tokenizer.model` is converted to one, and a repository's own tokenizer code (Kimi's
tiktoken-based `tokenization_kimi.py`, named in `tokenizer_config.json`'s `auto_map`) runs only where
the engine was started with `--trust-remote-code`. The counter follows it:

- `tokenizer.json`: the `tokenizers` library directly (Rust, light; transformers is not imported,
  and a long text is encoded without holding the GIL), which is what transformers' fast tokenizer
  runs on that file;
- a folder without one that still holds a tokenizer (`tokenizer_config.json` beside
  `tokenizer.model`, `tiktoken.model`, a `*.tiktoken` file, `vocab.json`, or an `auto_map`):
  transformers' `AutoTokenizer`, with remote code exactly when the engine trusts it, and never the
  network (`local_files_only`);
- nothing of the kind: None, and the caller estimates.

A folder that names a tokenizer but cannot be loaded (a broken file, remote code the engine would not
run either) is a `TokenizerError` naming the folder and the cause, as the engine would fail on it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("kvant.tokens")

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# Files beside tokenizer_config.json that say a folder holds a tokenizer transformers can build.
TOKENIZER_SOURCES = ("tokenizer.model", "tiktoken.model", "vocab.json", "vocab.txt")
# transformers' named special tokens, which every chat template is rendered with.
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# Texts longer than this are encoded without holding the GIL (FastEncoder.count).
LONG_TEXT_CHARS = 4096


class TokenizerError(ValueError):
    """The folder names a tokenizer that cannot be loaded: the message says which and why."""


class Encoder(Protocol):
    """What a counter needs of a tokenizer."""

    def count(self, text: str, special_tokens: bool) -> int:
        """The number of token ids `text` encodes to, with the tokenizer's special tokens or without."""

    def ids(self, text: str, special_tokens: bool) -> list[int]: ...

    def token_id(self, token: str) -> int | None:
        """The id of one token's text, or None where the vocabulary has no such token."""

    def special_tokens(self) -> dict[str, str]:
        """Named special tokens the tokenizer itself defines (bos_token, ...), beyond its config's."""


class FastEncoder:
    """`tokenizer.json` through the `tokenizers` library."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer  # noqa: PLC0415

        try:
            self._tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises its own Exception subclass for a bad file
            raise TokenizerError(f"cannot load the tokenizer {path}: {error}") from None

    def count(self, text: str, special_tokens: bool) -> int:
        if len(text) <= LONG_TEXT_CHARS:
            return len(self._tokenizer.encode(text, add_special_tokens=special_tokens).ids)
        # `encode` holds the GIL for its whole run (measured: 0.7 s for 40K tokens on a loaded 2-core
        # machine, every other thread stalled); `encode_batch` releases it, so the gate's event loop
        # keeps relaying while a worker thread counts a long prompt.
        (found,) = self._tokenizer.encode_batch([text], add_special_tokens=special_tokens)
        return len(found.ids)

    def ids(self, text: str, special_tokens: bool) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=special_tokens).ids)

    def token_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token) if token else None

    def special_tokens(self) -> dict[str, str]:
        return {}  # tokenizer.json keeps none by name: tokenizer_config.json does


class TransformersEncoder:
    """Any tokenizer transformers builds from the folder, as SGLang's `get_tokenizer` builds it."""

    def __init__(self, folder: Path, *, trust_remote_code: bool) -> None:
        try:
            from transformers import AutoTokenizer  # noqa: PLC0415

            self._tokenizer: Any = AutoTokenizer.from_pretrained(
                str(folder),
                trust_remote_code=trust_remote_code,
                local_files_only=True,
                clean_up_tokenization_spaces=False,  # as SGLang loads it
            )
        except Exception as error:  # transformers raises many kinds: each is a folder it cannot load
            code = not trust_remote_code and "trust_remote_code" in str(error)
            hint = " (the repository's own tokenizer code runs only with --trust-remote-code)" if code else ""
            raise TokenizerError(f"cannot load the tokenizer in {folder}: {error}{hint}") from None
        self._special_tokens = _named_special_tokens(self._tokenizer)

    def count(self, text: str, special_tokens: bool) -> int:
        return len(self.ids(text, special_tokens))

    def ids(self, text: str, special_tokens: bool) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=special_tokens))

    def token_id(self, token: str) -> int | None:
        if not token:
            return None
        found = self._tokenizer.convert_tokens_to_ids(token)
        return found if isinstance(found, int) and found != self._tokenizer.unk_token_id else None

    def special_tokens(self) -> dict[str, str]:
        return self._special_tokens


def load_encoder(folder: Path, *, trust_remote_code: bool = False) -> Encoder | None:
    """The folder's tokenizer (see the module's note), or None when the folder holds none."""
    if (folder / TOKENIZER_FILE).is_file():
        return FastEncoder(folder / TOKENIZER_FILE)
    if _holds_other_tokenizer(folder):
        return TransformersEncoder(folder, trust_remote_code=trust_remote_code)
    return None


def _holds_other_tokenizer(folder: Path) -> bool:
    if not (folder / TOKENIZER_CONFIG).is_file():
        return False
    if any((folder / name).is_file() for name in TOKENIZER_SOURCES) or any(folder.glob("*.tiktoken")):
        return True
    text = _read_text(folder / TOKENIZER_CONFIG)
    return '"auto_map"' in text and "AutoTokenizer" in text


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise TokenizerError(f"cannot read {path}: {error}") from None


def _named_special_tokens(tokenizer: Any) -> dict[str, str]:
    """bos_token and the rest as the tokenizer holds them (remote code may set them in Python)."""
    found: dict[str, str] = {}
    for name in SPECIAL_TOKENS:
        try:
            value = getattr(tokenizer, name, None)
        except Exception:  # transformers may raise for a token the tokenizer does not define
            continue
        if isinstance(value, str) and value:
            found[name] = value
    return found
