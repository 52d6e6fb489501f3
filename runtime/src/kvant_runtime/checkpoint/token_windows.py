"""Text to token windows: the built-in sets shipped with Kvant, or the user's own file or folder.

Nothing is fetched from a hub. The built-in sets are prose under `calibrate/data/` (calibration) and
`evaluate/data/` (evaluation, held out from calibration). `--data PATH` takes a UTF-8 text file, or
a folder whose `*.txt` files are read in name order (a PVC path works the same).

Text is tokenized with the model directory's own tokenizer when it has one. Otherwise each UTF-8
byte becomes the token with the same id (0..255): a deterministic fallback that needs no files and
covers any text, for models whose vocabulary has at least 256 entries.

The token stream is cut into consecutive windows of `sequence_length` tokens, at most `samples` of
them; a stream shorter than one window gives one shorter sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch

from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.stdlib_corpus import stdlib_docstrings

BYTE_VOCABULARY = 256
# Characters per token of English prose in a large vocabulary: enough text for the windows asked for.
_CHARS_PER_TOKEN = 4
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
_DOCUMENT_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class TokenWindows:
    samples: list[torch.Tensor]
    source: str  # "builtin:<set>" or the path given
    tokenizer: str  # "model" or "bytes"

    @property
    def tokens(self) -> int:
        return sum(int(sample.numel()) for sample in self.samples)


def builtin_text(package: str) -> str:
    """The `*.txt` files shipped in `<package>/data`, joined in name order."""
    folder = resources.files(package) / "data"
    files = sorted((entry for entry in folder.iterdir() if entry.name.endswith(".txt")), key=lambda e: e.name)
    return _DOCUMENT_SEPARATOR.join(entry.read_text(encoding="utf-8") for entry in files)


def user_text(path: Path) -> str:
    try:
        if path.is_dir():
            files = sorted(path.glob("*.txt"))
            if not files:
                raise CheckpointError(f"--data {path}: the folder holds no *.txt files")
            return _DOCUMENT_SEPARATOR.join(file.read_text(encoding="utf-8") for file in files)
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError(f"--data {path}: no such file or folder") from None
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointError(f"--data {path}: cannot read it as UTF-8 text: {err}") from err


def token_windows(
    model_dir: Path,
    vocab_size: int,
    data: Path | None,
    builtin_package: str,
    *,
    samples: int,
    sequence_length: int,
    grow_builtin: bool = False,
) -> TokenWindows:
    """`grow_builtin`: extend the built-in prose with the standard library's docstrings
    (`stdlib_corpus`) to about `samples` x `sequence_length` tokens, for GPTQ's Hessians; KV-scale
    calibration keeps the shipped prose alone (an absmax settles on little text)."""
    if samples < 1 or sequence_length < 2:
        raise CheckpointError(
            f"--samples {samples} --sequence-length {sequence_length}: need at least 1 sample of 2 tokens"
        )
    text = user_text(data) if data is not None else builtin_text(builtin_package)
    source = str(data) if data is not None else f"builtin:{builtin_package.rsplit('.', 1)[-1]}"
    wanted_chars = samples * sequence_length * _CHARS_PER_TOKEN
    if data is None and grow_builtin and len(text) < wanted_chars:
        text += _DOCUMENT_SEPARATOR + stdlib_docstrings(wanted_chars - len(text))
        source += "+stdlib-docstrings"
    ids, tokenizer = _tokenize(model_dir, text, vocab_size)
    if len(ids) < 2:
        raise CheckpointError(f"{source}: the text gives {len(ids)} tokens; at least 2 are needed")
    windows = [ids[start : start + sequence_length] for start in range(0, len(ids), sequence_length)]
    kept = [window for window in windows[:samples] if len(window) >= 2]
    return TokenWindows([torch.tensor(window, dtype=torch.long) for window in kept], source, tokenizer)


def _tokenize(model_dir: Path, text: str, vocab_size: int) -> tuple[list[int], str]:
    if any((model_dir / name).is_file() for name in _TOKENIZER_FILES):
        from transformers import AutoTokenizer  # noqa: PLC0415 - only when the model ships a tokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(model_dir)
        except (OSError, ValueError) as err:
            raise CheckpointError(f"{model_dir}: its tokenizer files do not load: {err}") from err
        ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids, "model"
    if vocab_size < BYTE_VOCABULARY:
        raise CheckpointError(
            f"{model_dir} has no tokenizer and its vocabulary ({vocab_size}) is smaller than the "
            f"{BYTE_VOCABULARY} byte tokens of the fallback; add the model's tokenizer files"
        )
    return list(text.encode("utf-8")), "bytes"
