#!/usr/bin/env bash
# Runs the timing-sensitive benchmarks (gate, convert, protection) on another, quieter machine with
# that machine's own Python: Kvant's packages are installed --no-deps into a scratch site, plus any
# wheels in .whl/ (e.g. pydantic, for a Python that lacks it). The 16-core numbers in
# bench/README.md were taken this way. Results: tables on stdout, JSON under $OUT.
#   OUT=/tmp/results bash bench/quiet_machine.sh [gate] [convert] [protection]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/kvant-quiet}"
SITE="$(mktemp -d)/site"
mkdir -p "$OUT"
wheels=()
[[ -d .whl ]] && wheels=(.whl/*.whl)
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$SITE" \
  ./cli ./kernels ./runtime ./operator ./devcluster "${wheels[@]}"
export PYTHONPATH="$SITE" PYTHONUNBUFFERED=1
"$PY" -c "import os, sys, numba, numpy, torch; print(sys.version.split()[0], os.cpu_count(), 'cores', 'numba', numba.__version__, 'numpy', numpy.__version__)"
for bench in "${@:-gate convert protection}"; do
  for name in $bench; do
    echo "== $name"
    case "$name" in
      gate) "$PY" bench/gate/latency.py --json "$OUT/gate.json" ;;
      convert) "$PY" bench/convert/run.py --workdir "$(mktemp -d)" --json "$OUT/convert.json" ;;
      protection) "$PY" bench/protection/run.py --json "$OUT/protection.json" ;;
      *) echo "unknown bench $name" >&2; exit 2 ;;
    esac
  done
done
