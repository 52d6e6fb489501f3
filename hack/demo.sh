#!/usr/bin/env bash
# The demo: a local cluster with a GPU node, left running for kubectl.
set -euo pipefail
VENV="$1"
export PATH="$VENV/bin:$PATH"
kvant dev down >/dev/null
kvant dev up --prometheus
eval "$(kvant dev env | grep '^export')"
echo
kubectl get nodes -L nvidia.com/gpu.product -o wide
echo
kubectl get node kvant-gpu-0 -o jsonpath='{.status.capacity}{"\n"}'
cat <<MSG

The local cluster stays up. Point kubectl at it with:
  eval "\$($VENV/bin/kvant dev env)"
Stop it with: make demo-down
MSG
