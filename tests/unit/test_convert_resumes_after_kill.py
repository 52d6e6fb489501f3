"""kill -9 mid-run publishes nothing; rerunning finishes, skips done shards, and gives the same digest."""

import json
import os
import signal
import subprocess
import time
from typing import Any

from kvant_contracts.artifact_manifest import MANIFEST_NAME
from kvant_runtime.checkpoint.staging import MARKER_SUFFIX, STAGING_DIR
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.convert_harness import convert, kvant, kvant_command

# Big enough that the later shards are still being written when the first marker appears.
BIG: dict[str, Any] = {"shards": 6, "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4}


def kill_after_first_marker(source, output) -> None:
    process = subprocess.Popen(
        [*kvant_command("convert", source, output, "--threads", "1")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    staging = output / STAGING_DIR
    deadline = time.monotonic() + 120
    while not (staging.is_dir() and any(p.name.endswith(MARKER_SUFFIX) for p in staging.iterdir())):
        assert process.poll() is None, "converter exited before the first shard finished"
        assert time.monotonic() < deadline
        time.sleep(0.002)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


def test_killed_run_publishes_nothing_and_rerun_gives_same_digest(tmp_path):
    source = tiny_checkpoint("llama", **BIG)
    uninterrupted = convert(source, tmp_path / "clean")

    output = tmp_path / "killed"
    kill_after_first_marker(source, output)
    assert not (output / MANIFEST_NAME).exists(), "the run finished before it was killed; nothing was tested"
    assert not list(output.glob("*.safetensors")) and not (output / "config.json").exists()
    markers = [p.name for p in (output / STAGING_DIR).iterdir() if p.name.endswith(MARKER_SUFFIX)]
    assert 1 <= len(markers) < 6

    rerun = kvant("convert", source, output, "--progress-json", "-")
    assert rerun.returncode == 0, rerun.stderr
    start = json.loads(rerun.stdout.splitlines()[0])
    assert start["event"] == "start" and start["shardsDone"] == len(markers) and start["shardsTotal"] == 6
    manifest = json.loads((output / MANIFEST_NAME).read_text())
    assert manifest["digest"] == uninterrupted["digest"]
    assert not (output / STAGING_DIR).exists()


def test_rerun_of_published_output_is_a_no_op_and_a_different_recipe_is_refused(tmp_path):
    source = tiny_checkpoint("llama")
    first = convert(source, tmp_path / "out")
    assert convert(source, tmp_path / "out")["digest"] == first["digest"]

    refused = kvant("convert", source, tmp_path / "out", "--group-size", "32")
    assert refused.returncode != 0
    assert "already holds a published artifact" in refused.stderr and "Traceback" not in refused.stderr
