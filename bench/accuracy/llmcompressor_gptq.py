"""llm-compressor's GPTQ (W4A16, symmetric INT4 groups) of a checkpoint, for `bench/accuracy/gptq.py`.

    BENCH_PYTHON bench/accuracy/llmcompressor_gptq.py SOURCE_DIR OUTPUT_DIR --tokens FILE \
        [--group-size 128] [--damp 0.01] [--actorder weight|none] [--dtype auto]

Runs in the bench-only venv (`hack/bench-llmcompressor-env.sh`), not in Kvant's: it imports nothing of
Kvant. It uses llm-compressor's documented API the way its W4A16 examples do: load the model with
transformers, `oneshot(model, dataset, recipe=GPTQModifier(targets="Linear", scheme="W4A16",
ignore=["lm_head"]))` with the sequential pipeline (one decoder layer at a time, each layer's inputs
taken from the already-quantized layers before it), then `save_pretrained(..., save_compressed=True)`,
which writes compressed-tensors pack-quantized INT4.

The calibration data is given as token ids (`--tokens`: JSON `{"samples": [[id, ...], ...]}`), so
llm-compressor sees exactly the windows Kvant's GPTQ calibrates on; they are used in full (no
truncation; `max_seq_length` is the longest window) and unshuffled. `--actorder weight` is
compressed-tensors' fixed-group activation ordering (columns processed by decreasing Hessian
diagonal, groups kept as runs of `--group-size` columns, no g_idx), the ordering Kvant's `--act-order`
uses; `none` turns it off. Group size 128 uses the W4A16 preset as it is; another group size uses the
same scheme with that group size.

The modules are imported with importlib: this file is type-checked in Kvant's venv, which has no
llm-compressor.
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("source", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--tokens", type=Path, required=True, help='JSON {"samples": [[id, ...], ...]}')
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--damp", type=float, default=0.01, help="GPTQModifier dampening_frac")
    parser.add_argument("--actorder", choices=("weight", "none"), default="weight")
    parser.add_argument("--dtype", default="auto", help="dtype the model is loaded (and calibrated) in")
    args = parser.parse_args()

    transformers: Any = importlib.import_module("transformers")
    datasets: Any = importlib.import_module("datasets")
    llmcompressor: Any = importlib.import_module("llmcompressor")
    gptq: Any = importlib.import_module("llmcompressor.modifiers.gptq")

    samples: list[list[int]] = json.loads(args.tokens.read_text())["samples"]
    model = transformers.AutoModelForCausalLM.from_pretrained(args.source, dtype=args.dtype)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.source)
    dataset = datasets.Dataset.from_dict(
        {"input_ids": samples, "attention_mask": [[1] * len(sample) for sample in samples]}
    )
    scheme: str | dict[str, Any] = (
        "W4A16"
        if args.group_size == 128
        else {
            "weights": {
                "num_bits": 4,
                "type": "int",
                "symmetric": True,
                "strategy": "group",
                "group_size": args.group_size,
                "dynamic": False,
            }
        }
    )
    recipe = gptq.GPTQModifier(
        targets="Linear",
        scheme=scheme,
        ignore=["lm_head"],
        dampening_frac=args.damp,
        actorder=None if args.actorder == "none" else args.actorder,
    )
    llmcompressor.oneshot(
        model=model,
        tokenizer=tokenizer,
        dataset=dataset,
        recipe=recipe,
        pipeline="sequential",
        num_calibration_samples=len(samples),
        max_seq_length=max(len(sample) for sample in samples),
        shuffle_calibration_samples=False,
        batch_size=1,
    )
    model.save_pretrained(args.output, save_compressed=True)
    tokenizer.save_pretrained(args.output)


if __name__ == "__main__":
    main()
