"""Two workers plus --finalize publish the same artifact (same digest) as one worker."""

import pytest

from kvant_contracts.artifact_manifest import MANIFEST_NAME
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.convert.converter import CORES_PER_SHARD
from tests.tiny_checkpoints import tiny_checkpoint
from tests.unit.convert_harness import convert, kvant


def test_two_workers_and_finalize_equal_one_worker(tmp_path):
    source = tiny_checkpoint("deepseek_v3", "fp8-block", shards=3)
    single = convert(source, tmp_path / "one", targets="experts")

    shared = tmp_path / "shared"
    assert convert(source, shared, targets="experts", worker_index=1, workers=2) is None
    assert not (shared / MANIFEST_NAME).exists()
    with pytest.raises(CheckpointError, match=r"2 of 3 shards are not converted yet \(model-00001-of-00003"):
        convert(source, shared, targets="experts", finalize=True)
    assert convert(source, shared, targets="experts", worker_index=0, workers=2) is None

    finalized = kvant("convert", source, shared, "--targets", "experts", "--finalize")
    assert finalized.returncode == 0, finalized.stderr
    assert convert(source, shared, targets="experts")["digest"] == single["digest"]
    assert sorted(p.name for p in shared.iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())


def test_finalize_with_other_flags_than_the_workers_is_refused(tmp_path):
    source = tiny_checkpoint("llama")
    convert(source, tmp_path / "out", worker_index=0, workers=2)
    with pytest.raises(CheckpointError, match="partial conversion made with"):
        convert(source, tmp_path / "out", group_size=64, finalize=True)


def test_shards_converted_side_by_side_equal_one_at_a_time(tmp_path):
    source = tiny_checkpoint("deepseek_v3", "fp8-block", shards=3)
    one_at_a_time = convert(source, tmp_path / "serial", targets="experts", threads=1)
    side_by_side = convert(source, tmp_path / "parallel", targets="experts", threads=3 * CORES_PER_SHARD)
    assert side_by_side["digest"] == one_at_a_time["digest"]
