"""How `kvant calibrate` and `kvant eval` hand their result to a person and to the operator.

Progress and messages go to stderr. The result is one JSON object on one line, printed last on
stdout, so the operator reads it from the last line of the Job pod's log; `--result FILE` writes the
same object to a file as well. A failure prints `kvant <command>: error: <message>` on stderr, with a
traceback only under `--debug`.

Exit codes: 0 success; 1 the accuracy gate failed (`kvant eval`); 2 bad input (a model folder, the
data or a flag; the message says which); 3 an internal error.

Calibrate's result (also kept in the manifest's `kvCache`) names the paths by which the artifact now
delivers its scales to SGLang, in `kvScalePaths` (`KV_SCALE_PATHS_FIELD`), a list of:
- `remap`: tensors `model.layers.N.self_attn.{k,v}_scale`, which SGLang's loader remaps;
- `exact`: tensors under the RadixAttention's own parameter names (`...self_attn.attn.k_scale`,
  `...self_attn.attn_mqa.k_scale` for MLA);
- `json`: `kvant-kv-scales.json`, for `--quantization-param-path` (with `tensorParallel`, the TP
  size it was written for).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

EXIT_GATE_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
KV_SCALE_PATHS_FIELD = "kvScalePaths"


def say(command: str, message: str) -> None:
    sys.stderr.write(f"kvant {command}: {message}\n")
    sys.stderr.flush()


def emit_result(result: dict[str, Any], result_file: Path | None) -> None:
    line = json.dumps(result, sort_keys=True)
    if result_file is not None:
        result_file.write_text(line + "\n")
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def fail(command: str, message: str, err: BaseException | None, debug: bool, expected: bool) -> int:
    """Reports a failure; `expected` errors (bad input) get no hint about tracebacks."""
    if debug and err is not None:
        raise err
    hint = "" if expected or err is None else " (rerun with --debug for a traceback)"
    sys.stderr.write(f"kvant {command}: error: {message}{hint}\n")
    return EXIT_BAD_INPUT if expected else EXIT_INTERNAL
