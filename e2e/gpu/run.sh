#!/usr/bin/env bash
# The GPU check, by hand on a machine with a GPU (CI has none): see e2e/gpu/README.md.
#
#   bash e2e/gpu/run.sh                        # full check on cuda, about 1 B parameters
#   bash e2e/gpu/run.sh --device cpu --small   # smoke test of the flow, no GPU needed
#
# Environment: OUT (results, default /tmp/kvant-gpu), BUDGET_S (hard limit for the whole check in
# seconds, default 570), PYTHON (interpreter command, default python3; e.g. "python -S" to hide
# site-packages). Extra arguments go to e2e/gpu/gpu_check.py (--help lists them).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/kvant-gpu}
BUDGET_S=${BUDGET_S:-570}
read -r -a PY <<<"${PYTHON:-python3}"
mkdir -p "$OUT"

# Kvant is not installed on the GPU machine: its source folders are the packages.
export PYTHONPATH="cli/src:contracts/src:kernels/src:runtime/src:devcluster/src:.${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export NUMBA_CACHE_DIR="$OUT/numba-cache"  # not next to the sources

# The driver stops optional steps 10 s before the hard limit; `timeout` is the hard limit.
rc=0
timeout --signal=TERM --kill-after=10 "$BUDGET_S" \
  "${PY[@]}" -m e2e.gpu.gpu_check --out "$OUT" --budget-seconds "$((BUDGET_S - 10))" "$@" \
  2>&1 | tee "$OUT/log.txt" || rc=$?

if [[ $rc -eq 124 || $rc -eq 137 ]]; then
  echo "run.sh: the check ran past ${BUDGET_S} s and was stopped; what it measured so far:"
  "${PY[@]}" -m e2e.gpu.report "$OUT/summary.json" || true
fi
if [[ " $* " != *" --keep-models "* ]]; then
  rm -rf "$OUT/models"  # gigabytes at full size; the driver removes them too when it ends normally
fi
if [[ -f $OUT/summary.json ]]; then
  echo "run.sh: exit ${rc}; summary in $OUT/summary.json, log in $OUT/log.txt"
else
  echo "run.sh: exit ${rc}; no summary was written, log in $OUT/log.txt"
fi
exit "$rc"
