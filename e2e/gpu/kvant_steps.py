"""Kvant's own steps, run in this process as `kvant <command>` runs them, plus their inputs.

The GPU machine has the repository's source folders on PYTHONPATH but no installed `kvant`, so there
are no entry points; the parser is built from the same command modules the `kvant` CLI registers,
and each step calls the command's own `run`. A command's JSON result goes to a file (`--result`)
and its stdout to `logs/<step>.out`; its progress lines go to stderr as usual.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvant_cli.modules import register_modules
from kvant_dev.tinymodel import make_tiny_checkpoint
from kvant_runtime.checkpoint.token_windows import builtin_text

COMMAND_MODULES = (
    "kvant_runtime.convert.convert_command",
    "kvant_runtime.calibrate.calibrate_command",
    "kvant_runtime.evaluate.eval_command",
)
CALIBRATION_TEXT = "kvant_runtime.calibrate"
EVALUATION_TEXT = "kvant_runtime.evaluate"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_BYTES_PER_BF16 = 2


@dataclass(frozen=True)
class ModelShape:
    """A synthetic Llama-style checkpoint: `kvant tiny-model`'s generator with these config overrides."""

    name: str
    overrides: dict[str, int] = field(default_factory=dict)
    shards: int = 2


# About 1.06 B parameters, almost all in the 24 decoder layers (the byte tokenizer keeps the
# vocabulary at 259): GQA with 16 query and 4 KV heads of 128, as in common 1-3 B models.
FULL_MODEL = ModelShape(
    "llama-1b-random",
    {
        "hidden_size": 2048,
        "intermediate_size": 5504,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "max_position_embeddings": 4096,
    },
    shards=4,
)
# `kvant tiny-model`'s own shape (hidden 128, 4 heads of 32, 2 KV heads) with 4 layers: the smoke run.
SMALL_MODEL = ModelShape("llama-tiny-random", {"num_hidden_layers": 4, "max_position_embeddings": 1024})


class StepFailed(Exception):
    pass


def make_model(path: Path, shape: ModelShape) -> dict[str, Any]:
    """Writes the random-weight BF16 checkpoint and returns its facts."""
    make_tiny_checkpoint(path, arch="llama", dtype="bf16", shards=shape.shards, seed=0, **shape.overrides)
    config = json.loads((path / "config.json").read_text())
    index = json.loads((path / "model.safetensors.index.json").read_text())
    total = int(index["metadata"]["total_size"])
    return {
        "name": shape.name,
        "architecture": config["architectures"][0],
        "parameters": total // _BYTES_PER_BF16,
        "bytes": total,
        "shards": shape.shards,
        "layers": config["num_hidden_layers"],
        "hiddenSize": config["hidden_size"],
        "intermediateSize": config["intermediate_size"],
        "attentionHeads": config["num_attention_heads"],
        "kvHeads": config["num_key_value_heads"],
        "headDim": config["head_dim"],
        "vocabulary": config["vocab_size"],
    }


def write_text(path: Path, package: str, characters: int, seed: int = 0) -> Path:
    """A text of at least `characters` characters: the built-in set's sentences, shuffled and repeated.

    The synthetic model's byte tokenizer makes one token per character, so this is the token count.
    """
    sentences = [s for s in _SENTENCE_END.split(builtin_text(package)) if s.strip()]
    rng = random.Random(seed)
    parts: list[str] = []
    length = 0
    while length < characters:
        rng.shuffle(sentences)
        for sentence in sentences:
            parts.append(sentence)
            length += len(sentence) + 1
    path.write_text(" ".join(parts) + "\n", encoding="utf-8")
    return path


def kvant(argv: list[str], logs: Path, step: str) -> None:
    """Runs `kvant <argv>` in this process; raises StepFailed on a non-zero exit code."""
    parser = argparse.ArgumentParser(prog="kvant")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    register_modules(subparsers, COMMAND_MODULES)
    args = parser.parse_args(argv)
    logs.mkdir(parents=True, exist_ok=True)
    stdout = logs / f"{step}.out"
    with stdout.open("w") as out, contextlib.redirect_stdout(out):
        code = int(args.run(args))
    if code != 0:
        raise StepFailed(
            f"`kvant {' '.join(argv)}` exited with {code}; its messages are above, stdout in {stdout}"
        )


def convert(source: Path, artifact: Path, weights: str, logs: Path) -> dict[str, Any]:
    """`kvant convert`: INT4 (all Linear layers), or with every Linear layer kept in BF16 (`bf16`)."""
    argv = ["convert", str(source), str(artifact)]
    if weights == "bf16":
        argv += ["--ignore", "re:.*"]
    started = time.monotonic()
    kvant(argv, logs, "convert")
    seconds = time.monotonic() - started
    manifest = json.loads((artifact / "kvant-manifest.json").read_text())
    return {
        "weights": weights,
        "argv": ["kvant", *argv],
        "sourceBytes": manifest["sourceBytes"],
        "artifactBytes": manifest["bytes"],
        "commandSeconds": round(seconds, 2),
        "sourceGBPerSecond": round(manifest["sourceBytes"] / seconds / 1e9, 3),
    }


def calibrate(
    artifact: Path, device: str, samples: int, sequence_length: int, data: Path, logs: Path
) -> dict[str, Any]:
    """`kvant calibrate --device DEVICE`; tokens/s is samples x sequence length over the step's seconds."""
    result_file = logs / "calibrate.json"
    argv = [
        "calibrate",
        str(artifact),
        "--device",
        device,
        "--samples",
        str(samples),
        "--sequence-length",
        str(sequence_length),
        "--data",
        str(data),
        "--result",
        str(result_file),
    ]
    started = time.monotonic()
    kvant(argv, logs, "calibrate")
    seconds = time.monotonic() - started
    result = json.loads(result_file.read_text())
    layers = result["layers"]
    return {
        "argv": ["kvant", *argv],
        "device": device,
        "samples": result["samples"],
        "sequenceLength": result["sequenceLength"],
        "tokens": result["tokens"],
        "tokensPerSecond": round(result["tokens"] / seconds, 1),
        "commandSeconds": round(seconds, 2),
        "maxKAbsmax": max(layer["kAbsmax"] for layer in layers),
        "maxVAbsmax": max(layer["vAbsmax"] for layer in layers),
        "kScales": [layer["kScale"] for layer in layers],
        "vScales": [layer["vScale"] for layer in layers],
        "digest": result["digest"],
    }


def evaluate(
    reference: Path,
    candidate: Path,
    *,
    kv_dtype: str,
    unit_scales: bool,
    device: str,
    samples: int,
    sequence_length: int,
    data: Path,
    logs: Path,
    step: str,
) -> dict[str, Any]:
    """`kvant eval`: the candidate's next-token distributions against the reference's."""
    result_file = logs / f"{step}.json"
    argv = [
        "eval",
        str(reference),
        str(candidate),
        "--kv-dtype",
        kv_dtype,
        "--device",
        device,
        "--samples",
        str(samples),
        "--sequence-length",
        str(sequence_length),
        "--data",
        str(data),
        "--json",
        "--result",
        str(result_file),
    ]
    if unit_scales:
        argv.append("--unit-scales")
    kvant(argv, logs, step)
    result = json.loads(result_file.read_text())
    keys = ("meanKLDivergence", "p99KLDivergence", "top1Agreement", "perplexity", "referencePerplexity")
    return {
        "argv": ["kvant", *argv],
        "kvCacheDtype": kv_dtype,
        "kvScales": result["kvScales"],
        "device": device,
        "samples": result["samples"],
        "tokens": result["tokens"],
        **{key: result[key] for key in keys},
    }
