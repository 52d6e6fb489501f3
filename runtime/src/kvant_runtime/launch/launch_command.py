"""`kvant launch`: build the SGLang command line from a launch spec, validate it, exec SGLang.

It runs inside the serving image, which is the user's SGLang image: the runtime image's init
container copies it there as a stdlib-only zipapp (`kvant launch-zipapp`), run by the image's own
Python, so the command line is validated by the SGLang that will serve. `--check` (the engine pod's
`engine-check` init container) does everything but exec and prints what it found as one JSON line
(`EngineCheck`: the SGLang version, whether it is driven, why not), which the operator shows in
`status.engine`; an SGLang version outside the line the launcher drives is refused by name.

Everything that can be wrong is checked before SGLang starts loading weights:
the spec's fields, the artifact against its manifest and digest, the weights
format against the checkpoint's config, and the final command line against
SGLang's own parser. Then the process becomes `python -m sglang.launch_server`
through exec: SGLang keeps the pod's PID, so the kubelet's SIGTERM and every
other signal reach it directly, with no wrapper in between to forward them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import sys
from pathlib import Path

log = logging.getLogger("kvant.launch")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_launch_parser(subparsers)
    zipapp = subparsers.add_parser(
        "launch-zipapp",
        help="write the launcher as a stdlib-only zipapp, for an SGLang image without Kvant",
        description="Write kvant launch as one .pyz file that any Python >= 3.10 runs.",
    )
    zipapp.add_argument("output", type=Path, metavar="PYZ")
    zipapp.set_defaults(run=_write_zipapp)


def add_launch_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`launch` alone: what the zipapp offers (`standalone.py`)."""
    parser = subparsers.add_parser(
        "launch",
        help="validate and exec SGLang from a launch spec",
        description="Build, validate (with SGLang's parser) and exec the SGLang command line.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--spec", type=Path, help="launch spec file, JSON or YAML")
    source.add_argument(
        "--spec-json",
        metavar="JSON",
        help="the launch spec inline (the operator puts it in the pod template, so a change rolls the pods)",
    )
    parser.add_argument(
        "--print-argv",
        "--dry-run",
        dest="dry_run",
        action="store_true",
        help="validate and print SGLang's command line, then exit (for users and reviewers)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="validate as --print-argv does, and print the image's SGLang version as one JSON line",
    )
    parser.add_argument(
        "--verify-content", action="store_true", help="re-hash every artifact file (reads all weights)"
    )
    parser.set_defaults(run=run)


def _write_zipapp(args: argparse.Namespace) -> int:
    from kvant_runtime.launch.zipapp import build_launcher  # noqa: PLC0415

    build_launcher(args.output)
    print(f"wrote {args.output}")
    return 0


def run(args: argparse.Namespace) -> int:
    from kvant_contracts.artifact_manifest import ManifestError  # noqa: PLC0415
    from kvant_contracts.engine_scheduler import engine_env  # noqa: PLC0415
    from kvant_contracts.launch_spec import SpecError, load_spec, parse_spec_json  # noqa: PLC0415
    from kvant_contracts.serving_pod import ADMIN_KEY_ENV  # noqa: PLC0415
    from kvant_runtime.launch.argv import (  # noqa: PLC0415
        checkpoint_quant_method,
        kvant_argv,
        redacted,
        with_admin_key,
    )
    from kvant_runtime.launch.cpu_engine import ENGINE_ENV, attention_backend, node_has_amx  # noqa: PLC0415
    from kvant_runtime.launch.sglang_support import SGLangMissing, installed_version, unsupported  # noqa: PLC0415
    from kvant_runtime.launch.validate import SGLangRejected, validate_argv  # noqa: PLC0415

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        version = installed_version()
        problem = unsupported(version)
    except SGLangMissing as missing:
        version, problem = "", str(missing)
    if problem is not None:
        return _refuse(args.check, version, False, problem)
    log.info("event=launch.sglang version=%s python=%s", version, platform.python_version())
    found: dict[str, str] = {}  # what the check reports besides the version: the CPU backend's choice
    try:
        spec = load_spec(args.spec) if args.spec else parse_spec_json(args.spec_json)
        amx = False
        if spec.device == "cpu":
            amx = node_has_amx()
            found = {"device": "cpu", "attentionBackend": attention_backend(amx), "amx": str(amx).lower()}
            os.environ.update(ENGINE_ENV)  # before SGLang's parser runs: it reads the engine's device
        # SGLang reads these at import or scheduler init: set before it starts, inherited through exec.
        scheduler_env = engine_env(spec.scheduler)
        os.environ.update(scheduler_env)
        check_artifact(Path(spec.modelPath), spec.artifactDigest, args.verify_content)
        token = os.environ.get(ADMIN_KEY_ENV, "").strip() or None
        argv = kvant_argv(spec, checkpoint_quant_method(Path(spec.modelPath)), amx) + list(spec.engineArgs)
        argv = with_admin_key(argv, token)
        validate_argv(argv, list(spec.engineArgs))
    except (SpecError, ManifestError, SGLangRejected) as error:
        return _refuse(args.check, version, True, str(error), found)
    command = [sys.executable, "-m", "sglang.launch_server", *argv]
    shown = shlex.join([*(f"{name}={value}" for name, value in scheduler_env.items()), *redacted(command)])
    if args.check:
        print(_check_line(version, True, None, found))
        return 0
    if args.dry_run:
        print(shown)
        return 0
    log.info("event=launch.exec command=%s", shlex.quote(shown))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)


def _refuse(
    check: bool, version: str, supported: bool, problem: str, found: dict[str, str] | None = None
) -> int:
    if check:
        print(_check_line(version, supported, problem, found), flush=True)
    print(f"kvant launch: {problem}", file=sys.stderr)
    return 2


def _check_line(
    version: str, supported: bool, problem: str | None, found: dict[str, str] | None = None
) -> str:
    from kvant_contracts.job_lines import EngineCheck  # noqa: PLC0415

    cpu = found or {}
    line = EngineCheck(
        sglangVersion=version,
        python=platform.python_version(),
        supported=supported,
        problem=problem,
        device=cpu.get("device", "cuda"),
        attentionBackend=cpu.get("attentionBackend"),
        amx=cpu.get("amx") == "true" if cpu else None,
    )
    return json.dumps(line.fields())


def check_artifact(artifact: Path, expected_digest: str | None, content: bool) -> None:
    """Verify the manifest; an artifact without one is served only when the spec expects no digest."""
    from kvant_contracts.artifact_manifest import MANIFEST_NAME, verify_artifact  # noqa: PLC0415

    if expected_digest is None and not (artifact / MANIFEST_NAME).exists():
        log.info(
            "event=launch.manifest status=absent path=%s (not a Kvant artifact; nothing to verify)", artifact
        )
        return
    manifest = verify_artifact(artifact, expected_digest, content)
    log.info("event=launch.manifest status=ok digest=%s files=%d", manifest.digest, len(manifest.files))
