"""Conversion benchmark: kvant convert vs the physical floor vs llm-compressor's model_free_ptq.

    python bench/convert/run.py --workdir /tmp/kvant-bench [--peer-path DIR] [--json FILE]

Generates (once) a Llama-style bf16 checkpoint of about 2.2 GB, then times in one run:
- the floor: reading every source byte, then writing as many bytes as kvant's output (fsync'd);
- `kvant convert --format int4 --group-size 128 --targets all-linear`;
- llm-compressor's `model_free_ptq(scheme="W4A16")` with lm_head and embeddings ignored, as kvant does.
Each tool runs as its own process; wall time and that process's peak RSS (wait4) are recorded, and
so is a process that only imports the tool, to separate startup from conversion.
Finally every tensor of the peer's output is compared with kvant's, bit for bit.

This process imports nothing heavy before the timings: Linux counts the RSS of the process that
spawned a child into the child's peak RSS (exec records the old address space's high-water mark),
so a parent holding torch would inflate every number by ~0.7 GB.
`--peer-path` is prepended to PYTHONPATH for the peer (llm-compressor installed there).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# ~1.08 B parameters: 24 layers x (attention 10.5 M + MLP 34.6 M), bf16.
BENCH_MODEL = {
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 128,
}
SHARDS = 5
CHUNK = 64 * 1024 * 1024


_GENERATE = """
import json, sys
from pathlib import Path
from kvant_dev.tinymodel import make_tiny_checkpoint
make_tiny_checkpoint(Path(sys.argv[1]), "llama", "bf16", int(sys.argv[2]), 0, **json.loads(sys.argv[3]))
"""


def generate_source(source: Path) -> None:
    """Writes the bench checkpoint from a child process, so torch never loads in this one."""
    model = json.dumps(BENCH_MODEL)
    subprocess.run([sys.executable, "-c", _GENERATE, str(source), str(SHARDS), model], check=True)


def timed(command: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Runs `command`; returns wall seconds and its peak RSS in GB."""
    start = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    assert process.stderr is not None
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{command[:3]} failed:\n{process.stderr.read().decode()[-3000:]}")
    return {"wallSeconds": round(wall, 2), "peakRssGB": round(usage.ru_maxrss / 1e6, 3)}


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def floor(source: Path, write_bytes: int, scratch: Path) -> dict[str, float]:
    """Read every source shard, then write `write_bytes` to disk with fsync: no tool can beat this."""
    start = time.monotonic()
    buffer = bytearray(CHUNK)
    for shard in sorted(source.glob("*.safetensors")):
        with shard.open("rb", buffering=0) as file:
            while file.readinto(buffer):
                pass
    with scratch.open("wb", buffering=0) as file:
        left = write_bytes
        while left > 0:
            left -= file.write(memoryview(buffer)[: min(CHUNK, left)])
        os.fsync(file.fileno())
    wall = time.monotonic() - start
    scratch.unlink()
    return {"wallSeconds": round(wall, 2)}


def tensors_equal(ours: Path, peer: Path) -> dict[str, Any]:
    """Bit-for-bit comparison of every tensor both outputs hold; lists the names only one has."""
    import torch  # noqa: PLC0415 (only after the timings: see the module docstring)
    from safetensors import safe_open  # noqa: PLC0415

    def names(directory: Path) -> dict[str, str]:
        weight_map: dict[str, str] = json.loads((directory / "model.safetensors.index.json").read_text())[
            "weight_map"
        ]
        return weight_map

    ours_map, peer_map = names(ours), names(peer)
    different = []
    for name in sorted(set(ours_map) & set(peer_map)):
        with safe_open(ours / ours_map[name], "pt") as a, safe_open(peer / peer_map[name], "pt") as b:
            if not torch.equal(a.get_tensor(name), b.get_tensor(name)):
                different.append(name)
    return {
        "compared": len(set(ours_map) & set(peer_map)),
        "different": different,
        "onlyOurs": sorted(set(ours_map) - set(peer_map)),
        "onlyPeer": sorted(set(peer_map) - set(ours_map)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument(
        "--peer-path", help="directory with llm-compressor, prepended to PYTHONPATH for the peer"
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args()
    source, ours, peer = args.workdir / "source", args.workdir / "kvant", args.workdir / "peer"
    if not (source / "model.safetensors.index.json").is_file():
        generate_source(source)
    first = args.workdir / "kvant-first"
    for stale in (ours, peer, first):
        shutil.rmtree(stale, ignore_errors=True)
    source_bytes = sum(p.stat().st_size for p in source.glob("*.safetensors"))

    # The first run on a machine compiles the INT4 kernel into numba's cache (here a fresh one); the
    # runtime image does that at build time, so the compared run is the second.
    env = {**os.environ, "NUMBA_CACHE_DIR": str(args.workdir / "numba-cache")}
    shutil.rmtree(env["NUMBA_CACHE_DIR"], ignore_errors=True)
    convert = [sys.executable, "-m", "kvant_cli.main", "convert", str(source)]
    first_run = timed([*convert, str(first), "--group-size", "128"], env=env)
    shutil.rmtree(first)
    kvant: dict[str, Any] = timed([*convert, str(ours), "--group-size", "128"], env=env)
    kvant["outputBytes"] = dir_bytes(ours)
    physical = floor(source, int(kvant["outputBytes"]), args.workdir / "floor.bin")
    # What importing each tool costs before any work.
    kvant["importOnly"] = timed([sys.executable, "-c", "import kvant_runtime.convert.converter"])
    kvant["firstRunWallSeconds"] = first_run["wallSeconds"]
    results: dict[str, Any] = {"sourceBytes": source_bytes, "floor": physical, "kvant": kvant}
    if args.peer_path:
        env = {**os.environ, "PYTHONPATH": args.peer_path}
        peer_code = (
            "from llmcompressor import model_free_ptq; "
            f"model_free_ptq({str(source)!r}, {str(peer)!r}, scheme='W4A16', "
            f"ignore=['lm_head', 'model.embed_tokens'], max_workers={os.cpu_count()}, device='cpu')"
        )
        results["peer"] = timed([sys.executable, "-c", peer_code], env=env)
        results["peer"]["outputBytes"] = dir_bytes(peer)
        results["peer"]["importOnly"] = timed([sys.executable, "-c", "import llmcompressor"], env=env)
        results["ratios"] = {
            "kvantOverFloor": round(kvant["wallSeconds"] / physical["wallSeconds"], 2),
            "peerOverKvantTime": round(results["peer"]["wallSeconds"] / kvant["wallSeconds"], 2),
            "kvantOverPeerRss": round(kvant["peakRssGB"] / results["peer"]["peakRssGB"], 3),
        }
        results["outputsEqual"] = tensors_equal(ours, peer)
    else:
        results["ratios"] = {"kvantOverFloor": round(kvant["wallSeconds"] / physical["wallSeconds"], 2)}
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def print_table(results: dict[str, Any]) -> None:
    floor_s = results["floor"]["wallSeconds"]
    print(f"source {results['sourceBytes'] / 1e9:.2f} GB, {os.cpu_count()} cores; floor {floor_s:.2f} s")
    print("| tool | wall s | x floor | peak RSS GB | output GB | import only: s / RSS GB |")
    print("|---|---|---|---|---|---|")
    for label, key in (("kvant convert", "kvant"), ("llm-compressor model_free_ptq", "peer")):
        if key in results:
            row = results[key]
            print(
                f"| {label} | {row['wallSeconds']:.2f} | {row['wallSeconds'] / floor_s:.2f} | "
                f"{row['peakRssGB']:.3f} | {row['outputBytes'] / 1e9:.3f} | "
                f"{row['importOnly']['wallSeconds']:.2f} / {row['importOnly']['peakRssGB']:.3f} |"
            )
    first_run = results["kvant"]["firstRunWallSeconds"]
    print(f"kvant's first run on this machine (compiles the kernel): {first_run:.2f} s")
    print("ratios:", json.dumps(results["ratios"]))
    if "outputsEqual" in results:
        equal = results["outputsEqual"]
        print(f"tensors compared {equal['compared']}, different {len(equal['different'])}")


if __name__ == "__main__":
    main()
