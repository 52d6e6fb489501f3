#!/usr/bin/env bash
# Creates (once) the local cluster's SGLang engine "image" and prints its path: a virtualenv with the
# real SGLang from PyPI, its CPU-usable dependencies at exact pins, and Kvant's sgl_kernel stand-in
# (two CPU bookkeeping ops; no CPU build of sgl-kernel is on PyPI). It is SGLang's own environment,
# kept apart from Kvant's venv (hack/venv.sh), whose pins differ (torch, transformers, ...).
# Keyed by the SGLang version and by the requirements and stand-in files, like the other cached
# cluster parts. Cold: a few minutes and ~7 GB (torch from PyPI brings the CUDA libraries); warm: it
# only prints the path. `--locate` prints the path only if it is built (exit 1 otherwise): the node
# agent asks this way and never builds.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${KVANT_CACHE:-$HOME/.cache/kvant}"
PY="${PYTHON:-python3.11}"
# shellcheck source=../devcluster/src/kvant_dev/versions.env
source "$ROOT/devcluster/src/kvant_dev/versions.env"
SGLANG_VERSION="$SGLANG_ENGINE_VERSION"
SRC="$ROOT/devcluster/src/kvant_dev/engine_image"
REQS="$SRC/requirements.txt"
STANDIN="$SRC/sgl_kernel_standin"

log() { printf '[engine-image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The pins are made for one SGLang version; the requirements file names it, and both move together.
if ! grep -qx "# sglang==$SGLANG_VERSION" "$REQS"; then
  log "$REQS is not pinned for sglang==$SGLANG_VERSION (needs a line '# sglang==$SGLANG_VERSION')"
  exit 1
fi
STANDIN_FILES=("$STANDIN/pyproject.toml" "$STANDIN"/sgl_kernel/*.py)
key=$(cat "$REQS" "${STANDIN_FILES[@]}" | sha256sum | cut -c1-12)
ENV="$CACHE/engine-sglang-$SGLANG_VERSION-$key"
if [[ "${1:-}" == --locate ]]; then
  [[ -f "$ENV/.complete" ]] && echo "$ENV" && exit 0
  exit 1
fi
mkdir -p "$CACHE"
exec 9>"$CACHE/engine-image.lock"
flock 9  # one build at a time; a concurrent caller waits and then reuses it
if [[ ! -f "$ENV/.complete" ]]; then
  start=$SECONDS
  log "creating $ENV (cold: several minutes, ~7 GB: torch brings CUDA libraries)"
  rm -rf "$ENV"
  "$PY" -m venv "$ENV"
  "$ENV/bin/pip" install -q --upgrade pip >&2
  # Every package at its exact pin and nothing resolved: the list is complete (see its header).
  "$ENV/bin/pip" install --progress-bar off --no-deps -r "$REQS" >&2
  "$ENV/bin/pip" install --progress-bar off --no-deps "sglang==$SGLANG_VERSION" >&2
  # Built from a copy: a build in place would leave build/ and *.egg-info in the checkout.
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/standin/sgl_kernel"
  cp "$STANDIN/pyproject.toml" "$work/standin/" && cp "$STANDIN"/sgl_kernel/*.py "$work/standin/sgl_kernel/"
  "$ENV/bin/pip" install --progress-bar off --no-deps "$work/standin" >&2
  # What the engine imports at start on CPU; a missing or broken package fails here, not in a pod.
  # SGLang makes its cache folder when imported: the scratch folder's, not ~/.cache/sglang.
  SGLANG_USE_CPU_ENGINE=1 SGLANG_CACHE_DIR="$work/sglang-cache" "$ENV/bin/python" -c \
    'import sgl_kernel, sglang.srt.entrypoints.http_server, sglang.srt.mem_cache.allocation' >&2
  touch "$ENV/.complete"
  log "built in $((SECONDS - start))s, $(du -sh "$ENV" | cut -f1)"
fi
echo "$ENV"
