"""A conversion that fills its output volume fails with a message on-call can act on (which file, how
much is free, what to do), not an "internal error" and a traceback hint. The fault is injected where
a full PersistentVolume meets the converter: the shard file's writes fail with ENOSPC (naming no
file, as a real write's error does) once its header is written."""

from __future__ import annotations

import errno
import io
from pathlib import Path

import pytest

from kvant_cli.main import main
from kvant_runtime.checkpoint import safetensors_io
from tests.tiny_checkpoints import tiny_checkpoint


class _FailingFile(io.BytesIO):
    def __init__(self, code: int) -> None:
        super().__init__()
        self.code = code

    def write(self, data: object) -> int:
        raise OSError(self.code, "No space left on device" if self.code == errno.ENOSPC else "I/O error")


def _convert_with_failing_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int
) -> tuple[int, str, Path]:
    original = safetensors_io.ShardWriter.__init__

    def then_fail(self: safetensors_io.ShardWriter, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        self._file.close()
        self._file = _FailingFile(code)

    monkeypatch.setattr(safetensors_io.ShardWriter, "__init__", then_fail)
    output = tmp_path / "out"
    args = ["convert", str(tiny_checkpoint("llama")), str(output), "--format", "int4", "--group-size", "32"]
    returned = main(args)
    return returned, capsys.readouterr().err.strip().splitlines()[-1], output


def test_a_full_output_volume_is_named_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err, output = _convert_with_failing_writes(tmp_path, monkeypatch, capsys, errno.ENOSPC)
    assert code == 1, err
    assert err.startswith(f"kvant convert: error: no space left writing {output}"), err
    assert ".safetensors" in err and "GiB free on the output volume" in err, err
    assert "grow the artifacts volume" in err and "resumes" in err, err
    assert "internal error" not in err and "--debug" not in err, err


def test_other_os_errors_stay_internal_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err, _ = _convert_with_failing_writes(tmp_path, monkeypatch, capsys, errno.EIO)
    assert code == 1 and "internal error: OSError" in err and "--debug" in err, err
