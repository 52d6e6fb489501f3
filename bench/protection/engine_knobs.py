"""SGLang's own admission knobs (`spec.serving.scheduler`) swept on the real engine: retractions
against goodput, unprotected and behind the gate's default admission.

Method, fixed before any run: the workload, arrivals, SLO and fronts of `open_loop.py` (prose prompts
of about 45 tokens, answers of exactly 256, seeded Poisson arrivals, TTFT <= 4 s and TPOT <= 0.15 s),
at `--load` times the capacity the engine shows at SGLang's defaults (measured once, first). For each
setting the engine is started afresh with the knobs through the launcher, as a serving pod's would be
(`bench/real_engine.py`), its `/server_info` is read back to show SGLang took the flag, and each front
runs one cell per repetition. A cell ending with a 1-minute load average over `LOAD_LIMIT` is marked
noisy and left out.

What it can and cannot decide: on this CPU a decode step's cost grows with the batch, on a GPU it
barely does, so a setting that trades batch size for fewer retractions costs more here than there.
The product keeps SGLang's defaults (kvant_contracts.engine_scheduler); this table shows what a
model that sets them can expect, not a GPU default.

    python bench/protection/engine_knobs.py [--load 2] [--runs 1] [--seconds 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from kvant_dev.tinychat import ensure_tiny_chat_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.protection.open_loop import MAX_RUNNING, SLO, WORKLOADS, capacity, cell, median_of
from bench.protection.real_engine import split_cpus
from bench.real_engine import real_engine

# name -> the knobs set (the rest at SGLang's defaults)
SETTINGS: dict[str, dict[str, float]] = {
    "defaults": {},
    "conservativeness 0.3": {"conservativeness": 0.3},
    "conservativeness 1.5": {"conservativeness": 1.5},  # ratio 1: the running batch's whole growth
    "minNewTokenRatioFactor 0.5": {"minNewTokenRatioFactor": 0.5},
}
FRONTS = ("off", "engine")
WORKLOAD = WORKLOADS["short"]  # the open-loop bench's: prose prompts, 256-token answers


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kv-tokens", type=int, default=4096)
    parser.add_argument("--load", type=float, default=2.0, help="times the engine's default capacity")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    model = ensure_tiny_chat_model()
    texts = WORKLOAD.texts(model)
    workdir = Path(tempfile.mkdtemp(prefix="kvant-bench-knobs-"))
    cpus = split_cpus()
    one_x: float | None = None
    rows: list[dict[str, Any]] = []
    for name in args.settings.split(","):
        knobs = SETTINGS[name]
        with real_engine(model, args.kv_tokens, workdir, MAX_RUNNING, cpus=cpus, scheduler=knobs) as engine:
            with urllib.request.urlopen(f"{engine}/server_info", timeout=30) as answer:
                taken = json.load(answer)["schedule_conservativeness"]
            if one_x is None:
                one_x = capacity(engine, args.kv_tokens, WORKLOAD, texts)
                print(f"1x = {one_x:.2f} requests/s at SGLang's defaults; SLO {SLO}", flush=True)
            for front in FRONTS:
                for run in range(args.runs):
                    found = cell(
                        workdir,
                        engine,
                        model,
                        front,
                        rate=args.load * one_x,
                        run=run,
                        seconds=args.seconds,
                        new_tokens=WORKLOAD.new_tokens,
                        texts=texts,
                    )
                    found.pop("samples")
                    row = {"setting": name, "knobs": knobs, "conservativeness": taken, "front": front}
                    row.update(found)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print(table(rows, args.load))
    if args.json:
        report = {"one_x_rps": one_x, "new_tokens": WORKLOAD.new_tokens, "rows": rows}
        args.json.write_text(json.dumps(report, indent=1))


def table(rows: list[dict[str, Any]], load: float) -> str:
    lines = [
        f"| setting | SGLang's conservativeness | front | goodput tok/s at {load:g}x | good / sent "
        "| retractions per 1,000 | TTFT p50 s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["setting"] for r in rows):
        for front in FRONTS:
            quiet = [r for r in rows if r["setting"] == name and r["front"] == front and not r["noisy"]]
            if not quiet:
                lines.append(f"| {name} | | {front} | every run noisy | | | |")
                continue

            lines.append(
                f"| {name} | {quiet[0]['conservativeness']} | {front} | {median_of(quiet, 'goodput')} | "
                f"{median_of(quiet, 'good')} / {median_of(quiet, 'sent')} | "
                f"{median_of(quiet, 'retractions_per_1000')} | {median_of(quiet, 'ttft_p50_s')} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
