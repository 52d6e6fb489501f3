"""`kvant convert` never loads torch: its import alone would cost ~0.7 GB of RSS per converter pod."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.tiny_checkpoints import tiny_checkpoint

_PROBE = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(m for m in ("torch", "transformers") if m in sys.modules))))
from kvant_cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_convert_of_a_bf16_and_an_fp8_block_source_loads_no_torch(tmp_path: Path) -> None:
    sources = {"bf16": tiny_checkpoint("llama"), "fp8": tiny_checkpoint("deepseek_v3", "fp8-block")}
    for variant, source in sources.items():
        output = tmp_path / variant
        args = ["convert", str(source), str(output), "--format", "int4", "--group-size", "32"]
        result = subprocess.run(
            [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr
        assert (output / "kvant-manifest.json").is_file()
        assert json.loads(result.stdout.strip().splitlines()[-1]) == []
