"""`kvant launch`: build the SGLang command line from a launch spec, validate it, exec SGLang.

Everything that can be wrong is checked before SGLang starts loading weights:
the spec's fields, the artifact against its manifest and digest, the weights
format against the checkpoint's config, and the final command line against
SGLang's own parser. Then the process becomes `python -m sglang.launch_server`
through exec: SGLang keeps the pod's PID, so the kubelet's SIGTERM and every
other signal reach it directly, with no wrapper in between to forward them.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from pathlib import Path

log = logging.getLogger("kvant.launch")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    parser.add_argument("--dry-run", action="store_true", help="validate and print the command; do not start")
    parser.add_argument(
        "--verify-content", action="store_true", help="re-hash every artifact file (reads all weights)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kvant_contracts.artifact_manifest import ManifestError  # noqa: PLC0415
    from kvant_contracts.launch_spec import SpecError, load_spec, parse_spec_json  # noqa: PLC0415
    from kvant_contracts.serving_pod import ADMIN_KEY_ENV  # noqa: PLC0415
    from kvant_runtime.launch.argv import (  # noqa: PLC0415
        checkpoint_quant_method,
        kvant_argv,
        redacted,
        with_admin_key,
    )
    from kvant_runtime.launch.validate import SGLangRejected, validate_argv  # noqa: PLC0415

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        spec = load_spec(args.spec) if args.spec else parse_spec_json(args.spec_json)
        check_artifact(Path(spec.modelPath), spec.artifactDigest, args.verify_content)
        token = os.environ.get(ADMIN_KEY_ENV, "").strip() or None
        argv = kvant_argv(spec, checkpoint_quant_method(Path(spec.modelPath))) + list(spec.engineArgs)
        argv = with_admin_key(argv, token)
        validate_argv(argv, list(spec.engineArgs))
    except (SpecError, ManifestError, SGLangRejected) as error:
        print(f"kvant launch: {error}", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "sglang.launch_server", *argv]
    shown = shlex.join(redacted(command))
    if args.dry_run:
        print(shown)
        return 0
    log.info("event=launch.exec command=%s", shlex.quote(shown))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)


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
