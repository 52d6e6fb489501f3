"""GPTQ's built-in calibration text is as long as asked: Kvant's few KB of prose, then the standard
library's docstrings (read from source, deterministic), where KV-scale calibration keeps the prose."""

from __future__ import annotations

from kvant_runtime.checkpoint.stdlib_corpus import MIN_DOCSTRING_CHARS, stdlib_docstrings
from kvant_runtime.checkpoint.token_windows import token_windows
from tests.tiny_checkpoints import tiny_checkpoint

CALIBRATION_DATA = "kvant_runtime.calibrate"


def test_grown_text_fills_the_windows_asked_for_and_is_deterministic():
    model = tiny_checkpoint("llama")  # no tokenizer files: one token per byte
    prose = token_windows(model, 256, None, CALIBRATION_DATA, samples=16, sequence_length=1024)
    grown = token_windows(
        model, 256, None, CALIBRATION_DATA, samples=16, sequence_length=1024, grow_builtin=True
    )
    assert prose.tokens < 16 * 1024  # the shipped prose alone is a few KB
    assert grown.tokens == 16 * 1024 and grown.source.endswith("+stdlib-docstrings")
    again = token_windows(
        model, 256, None, CALIBRATION_DATA, samples=16, sequence_length=1024, grow_builtin=True
    )
    assert all(a.equal(b) for a, b in zip(grown.samples, again.samples, strict=True))
    assert grown.samples[0][:64].equal(prose.samples[0][:64])  # the prose comes first


def test_docstrings_skip_tests_and_short_summaries(tmp_path):
    root = tmp_path / "lib"
    (root / "test").mkdir(parents=True)
    long_doc = "x" * MIN_DOCSTRING_CHARS
    (root / "a.py").write_text(f'"""{long_doc}"""\ndef f():\n    """short"""\n')
    (root / "test" / "b.py").write_text(f'"""{"y" * MIN_DOCSTRING_CHARS}"""\n')
    (root / "broken.py").write_text("def (:\n")
    assert stdlib_docstrings(10**6, root) == long_doc
