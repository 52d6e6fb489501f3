"""Orchestrates a conversion: which shards this worker owns, resume, and finalize/publish.

`workers == 1` converts every shard and publishes. With `workers = N > 1`, worker `I` converts the
shards at positions i ≡ I (mod N) of the sorted shard list into the shared staging prefix and stops;
a separate `finalize` checks every shard is done and publishes.

`--method gptq` first rounds every targeted weight with GPTQ, one decoder layer after the other
(`kvant_runtime.gptq`), staged under the same staging prefix; the shard conversion then writes those
rounded tensors instead of RTN's. GPTQ is sequential over layers, so it runs in one worker only.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from kvant_contracts.artifact_manifest import file_sha256
from kvant_contracts.job_lines import ArtifactResult
from kvant_contracts.safetensors_header import INDEX_FILE
from kvant_runtime.checkpoint.contained_paths import check_disjoint
from kvant_runtime.checkpoint.errors import CheckpointError
from kvant_runtime.checkpoint.safetensors_io import ShardReader
from kvant_runtime.checkpoint.source import SourceCheckpoint, open_source
from kvant_runtime.checkpoint.staging import Staging
from kvant_runtime.convert import artifact_files as artifact
from kvant_runtime.convert.recipe import Recipe, same_recipe
from kvant_runtime.convert.shard import Action, convert_shard, plan_shard, unquantized_linear_modules
from kvant_runtime.gptq.prerounded import GPTQ_DIR, PreRounded
from kvant_runtime.job_progress import Progress

# A shard's writer hashes and writes its file on one thread (sha256 runs at ~1 GB/s), which starves a
# many-core pool when shards go one at a time; so one shard runs per this many threads, sharing them.
CORES_PER_SHARD = 4


@dataclass(frozen=True)
class Job:
    source_dir: Path
    output_dir: Path
    recipe: Recipe
    revision: str | None = None
    worker_index: int = 0
    workers: int = 1
    finalize: bool = False
    threads: int = 0  # 0: one per CPU core
    allowed_roots: tuple[Path, ...] = ()  # where links out of the source may lead (--allow-symlinks-into)
    # The Python API's injectable stop (no CLI flag): GPTQ stops after this many decoder layers, as
    # if killed there, so that tests can show a rerun resumes.
    stop_after_layers: int | None = None

    def __post_init__(self) -> None:
        if self.recipe.method == "gptq" and self.workers > 1:
            raise CheckpointError(
                f"--method gptq runs in one worker (each decoder layer's calibration inputs come from the "
                f"rounded layer before it); drop --workers {self.workers} --worker-index {self.worker_index}"
            )
        if self.workers < 1 or not 0 <= self.worker_index < self.workers:
            raise CheckpointError(
                f"--worker-index {self.worker_index} --workers {self.workers}: need workers >= 1 "
                "and 0 <= worker-index < workers"
            )
        if self.finalize and self.workers > 1:
            raise CheckpointError("--finalize runs once after all workers; do not combine it with --workers")
        check_disjoint(self.source_dir, self.output_dir)


def run(job: Job, progress: Progress) -> dict[str, Any] | None:
    """Runs the job; returns the published manifest, or None when this worker's part is done."""
    staging = Staging(job.output_dir)
    identity = _identity(job)
    if (published := staging.published_manifest()) is not None:
        return _already_published(job, published, identity, progress)
    source = open_source(job.source_dir, job.allowed_roots)
    if job.finalize:
        staging.check_identity(identity)
    else:
        staging.claim(identity)
        prerounded = None
        if (
            job.recipe.method == "gptq"
            and (prerounded := _round_with_gptq(job, source, staging, progress)) is None
        ):
            progress.note(f"stopped after {job.stop_after_layers} GPTQ layers; rerun to resume")
            return None
        try:
            _convert_my_shards(job, source, staging, progress, prerounded)
        finally:
            if prerounded is not None:
                prerounded.close()
        if job.workers > 1:
            progress.done(f"worker {job.worker_index}/{job.workers} finished its shards in {staging.dir}")
            return None
    manifest = finalize(job, source, staging)
    progress.done(
        f"published {job.output_dir} ({manifest['bytes'] / 1e9:.2f} GB, {manifest['digest']})",
        **_result(manifest),
    )
    return manifest


def _result(manifest: dict[str, Any]) -> dict[str, Any]:
    """The artifact facts the operator reads from the final progress line."""
    return ArtifactResult(manifest["digest"], manifest["bytes"], manifest["sourceBytes"]).fields()


def _identity(job: Job) -> dict[str, Any]:
    """What a partial or published output was made from; a resume must match it exactly."""
    return {"recipe": job.recipe.to_json(), "revision": job.revision}


def _already_published(
    job: Job, published: dict[str, Any], identity: dict[str, Any], progress: Progress
) -> dict[str, Any]:
    if not same_recipe(published["recipe"], job.recipe) or published["source"]["revision"] != job.revision:
        raise CheckpointError(
            f"{job.output_dir} already holds a published artifact made with recipe {published['recipe']} "
            f"from revision {published['source']['revision']!r}; choose another output directory"
        )
    progress.done(
        f"{job.output_dir} is already published ({published['digest']}); nothing to do", **_result(published)
    )
    return published


def _round_with_gptq(
    job: Job, source: SourceCheckpoint, staging: Staging, progress: Progress
) -> PreRounded | None:
    """Runs (or resumes) GPTQ into the staging prefix; None when it stopped early (tests)."""
    from kvant_runtime.gptq.model_pass import quantize_layers  # noqa: PLC0415 - torch only for GPTQ

    # The shard plan first: it refuses what the converter cannot quantize before GPTQ spends any time.
    quantized: dict[str, str] = {}
    for shard in source.shards:
        reader = ShardReader(source.shard_path(shard))
        reader.close()
        for planned in plan_shard(source, shard, reader, job.recipe):
            if planned.action is Action.QUANTIZE:
                quantized[planned.source.name] = planned.source.dtype
    directory = staging.dir / GPTQ_DIR
    if not quantize_layers(
        job.source_dir,
        job.recipe,
        quantized,
        directory,
        progress=progress,
        stop_after_layers=job.stop_after_layers,
    ):
        return None
    prerounded = PreRounded(directory)
    if outside := sorted(name for name in quantized if prerounded.get(name) is None):
        progress.note(
            f"{len(outside)} target weights lie outside the decoder layers GPTQ runs through "
            f"(e.g. {outside[0]}); they are rounded with RTN"
        )
    return prerounded


def _convert_my_shards(
    job: Job, source: SourceCheckpoint, staging: Staging, progress: Progress, prerounded: PreRounded | None
) -> None:
    mine = [shard for i, shard in enumerate(source.shards) if i % job.workers == job.worker_index]
    done = [shard for shard in mine if staging.marker(shard) is not None]
    progress.start(
        shards_total=len(mine),
        bytes_total=sum(source.shard_bytes(s) for s in mine),
        shards_done=len(done),
        bytes_done=sum(source.shard_bytes(s) for s in done),
    )
    threads = job.threads or os.cpu_count() or 1
    todo = [shard for shard in mine if shard not in done]
    parallel = max(1, min(len(todo), threads // CORES_PER_SHARD))
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="kvant-shard") as pool:
        convert = partial(
            _convert_one,
            job=job,
            source=source,
            staging=staging,
            progress=progress,
            threads=threads // parallel,
            prerounded=prerounded,
        )
        futures = [pool.submit(convert, shard) for shard in todo]
        for future in as_completed(futures):
            if (error := future.exception()) is not None:
                # Shards already running finish and keep their markers (a rerun resumes from them);
                # queued ones never start. Nothing is published.
                pool.shutdown(cancel_futures=True)
                raise error


def _convert_one(
    shard: str,
    *,
    job: Job,
    source: SourceCheckpoint,
    staging: Staging,
    progress: Progress,
    threads: int,
    prerounded: PreRounded | None,
) -> None:
    counted = [0]

    def advance(nbytes: int) -> None:
        counted[0] += nbytes
        progress.advance(nbytes)

    result = convert_shard(
        source=source,
        shard=shard,
        recipe=job.recipe,
        destination=staging.partial_path(shard),
        threads=threads,
        on_bytes=advance,
        prerounded=prerounded,
    )
    progress.advance(source.shard_bytes(shard) - counted[0])  # the header and consumed FP8 scales
    staging.finish_shard(
        shard,
        {
            "bytes": result.file_bytes,
            "sha256": result.sha256,
            "tensorBytes": result.tensor_bytes,
            "tensors": list(result.tensors),
        },
    )
    progress.shard_done(shard)


def finalize(job: Job, source: SourceCheckpoint, staging: Staging) -> dict[str, Any]:
    markers = {shard: staging.marker(shard) for shard in source.shards}
    if missing := [shard for shard, marker in markers.items() if marker is None]:
        listed = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise CheckpointError(
            f"cannot finalize {job.output_dir}: {len(missing)} of {len(source.shards)} shards are not "
            f"converted yet ({listed}); run the workers that own them"
        )
    done = {shard: marker for shard, marker in markers.items() if marker is not None}
    ignore, has_kv_scales = _config_facts(job, source)
    weight_map = {name: shard for shard, marker in done.items() for name in marker["tensors"]}
    written = {
        INDEX_FILE: artifact.index(weight_map, sum(marker["tensorBytes"] for marker in done.values())),
        "config.json": artifact.output_config(source, job.recipe, ignore, has_kv_scales),
    }
    for name, data in written.items():
        staging.staged_path(name).write_text(artifact.dumps(data))
    copied = artifact.copied_files(source)
    artifact.copy_into(source, copied, staging.dir)
    files = {shard: {"sha256": marker["sha256"], "bytes": marker["bytes"]} for shard, marker in done.items()}
    for name in [*written, *copied]:
        path = staging.staged_path(name)
        files[name] = {"sha256": file_sha256(path), "bytes": path.stat().st_size}
    manifest = artifact.manifest(job.recipe, source, job.revision, files)
    staging.publish(sorted(files), manifest)
    return manifest


def _config_facts(job: Job, source: SourceCheckpoint) -> tuple[list[str], bool]:
    """The unquantized Linear modules and whether KV scales exist, from the source headers alone."""
    ignore: list[str] = []
    has_kv_scales = False
    for shard in source.shards:
        reader = ShardReader(source.shard_path(shard))
        reader.close()
        jobs = plan_shard(source, shard, reader, job.recipe)
        ignore += unquantized_linear_modules(jobs)
        has_kv_scales |= any(j.source.name.endswith(artifact.KV_SCALE_SUFFIXES) for j in jobs)
    return ignore, has_kv_scales
