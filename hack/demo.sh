#!/usr/bin/env bash
# The demo: a local cluster with a GPU node, Kvant installed from its Helm chart, and
# examples/tiny.yaml converted, calibrated and served by the simulator engine. Left running.
# KVANT_DEMO_ENGINE=sglang serves examples/tinychat-cpu.yaml instead: the real SGLang engine on this
# machine's CPU, with a tiny trained chat model (BF16: FP8 KV and INT4 need a GPU or AMX).
set -euo pipefail
VENV="$1"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export PATH="$VENV/bin:$PATH"
ENGINE="${KVANT_DEMO_ENGINE:-simulator}"
case "$ENGINE" in
  simulator) EXAMPLE=tiny ;;
  sglang) EXAMPLE=tinychat-cpu ;;
  *) echo "KVANT_DEMO_ENGINE must be simulator or sglang, got '$ENGINE'" >&2; exit 2 ;;
esac
MODEL_PATH=/var/lib/kvant/models/tiny-llama   # the node path examples/tiny.yaml names
ARTIFACTS_PATH=/var/lib/kvant/artifacts

kvant dev down >/dev/null
kvant dev up --prometheus
eval "$(kvant dev env | grep '^export')"
# Node paths live in the cluster's own folder (KVANT_NODE_ROOT), never on this machine's /var/lib.
MODEL_DIR="$KVANT_NODE_ROOT$MODEL_PATH"
echo
kubectl get nodes -L nvidia.com/gpu.product

echo; echo "== installing Kvant from charts/kvant"
# The local S3 (SeaweedFS) and Hub stand-in are the operator's default source endpoints, and
# fetch pods read the local S3's keys from a Secret named kvant-source-credentials.
helm upgrade --install kvant "$ROOT/charts/kvant" --namespace kvant-system --create-namespace --wait --timeout 5m \
  --set replicas=1 --set sources.s3.endpoint="$AWS_ENDPOINT_URL" --set sources.s3.region="$AWS_REGION" \
  --set sources.hfEndpoint="$HF_ENDPOINT" --set sources.defaultCredentialsSecret=kvant-source-credentials >/dev/null
kubectl -n kvant-system get pods -o wide

echo; echo "== a tiny checkpoint and an artifact volume for namespace demo"
[[ -f "$MODEL_DIR/config.json" ]] || kvant tiny-model "$MODEL_DIR" >/dev/null
mkdir -p "$KVANT_NODE_ROOT$ARTIFACTS_PATH"
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: demo-artifacts}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteMany]
  storageClassName: kvant-local
  hostPath: {path: $ARTIFACTS_PATH, type: Directory}
  claimRef: {namespace: demo, name: kvant-artifacts}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: kvant-artifacts, namespace: demo}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: kvant-local
  resources: {requests: {storage: 10Gi}}
---
apiVersion: v1
kind: Secret
metadata: {name: kvant-source-credentials, namespace: demo}
stringData: {AWS_ACCESS_KEY_ID: "$AWS_ACCESS_KEY_ID", AWS_SECRET_ACCESS_KEY: "$AWS_SECRET_ACCESS_KEY"}
YAML

echo; echo "== the same checkpoint in the local S3 (s3://models/tiny-llama), for examples/tiny-from-s3.yaml"
"$VENV/bin/python" - "$MODEL_DIR" <<'PY'
import sys
from pathlib import Path
import boto3
client = boto3.client("s3")  # AWS_ENDPOINT_URL and the keys come from `kvant dev env`
if "models" not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
    client.create_bucket(Bucket="models")
for path in sorted(Path(sys.argv[1]).iterdir()):
    client.upload_file(str(path), "models", f"tiny-llama/{path.name}")
print(f"uploaded {len(list(Path(sys.argv[1]).iterdir()))} files")
PY

MODEL=$(awk '/^  name:/ {print $2; exit}' "$ROOT/examples/$EXAMPLE.yaml")
if [[ "$ENGINE" == sglang ]]; then
  echo; echo "== the tiny chat model (trained once on this machine, then cached) for the real engine"
  CHAT_DIR="$KVANT_NODE_ROOT/var/lib/kvant/models/tinychat"   # the node path tinychat-cpu.yaml names
  [[ -f "$CHAT_DIR/tokenizer.json" ]] || kvant tiny-chat-model "$CHAT_DIR"
fi

echo; echo "== kubectl apply -n demo -f examples/$EXAMPLE.yaml"
kubectl apply -n demo -f "$ROOT/examples/$EXAMPLE.yaml"
last=""
for _ in $(seq 1 600); do
  line=$(kubectl get qm "$MODEL" -n demo -o jsonpath='{.status.phase}{"  "}{range .status.conditions[?(@.status=="False")]}{.type}: {.message}{"  "}{end}' 2>/dev/null | cut -c1-150)
  [[ "$line" != "$last" ]] && { printf '  %s  %s\n' "$(date +%T)" "$line"; last="$line"; }
  [[ "$line" == Ready* ]] && break
  sleep 1
done
echo
kubectl get qm -n demo
kubectl get pods,services -n demo -o wide
echo; echo "== a request through the model's Service (ClusterIP; kube-proxy picks a replica's gate)"
SERVICE_IP=$(kubectl get service "$MODEL" -n demo -o jsonpath='{.spec.clusterIP}')
# SGLang reads a JSON body only under its content type (curl -d alone says form data: a 400); a failed
# request fails the demo.
curl -s --fail-with-body --max-time 60 "http://$SERVICE_IP/generate" -H 'Content-Type: application/json' \
  -d '{"text":"hello","sampling_params":{"max_new_tokens":8}}'
echo
cat <<MSG

The local cluster stays up. Try:
  eval "\$($VENV/bin/kvant dev env)"
  kubectl get qm -n demo $MODEL -o yaml                      # plan, artifact, protection, conditions
  kubectl patch qm $MODEL -n demo --type=merge -p '{"spec":{"limits":{"maxConcurrency":4}}}'
  kubectl apply -n demo -f examples/tiny-from-s3.yaml      # fetched from the local S3, then the same path
  kubectl get qm tiny-from-s3 -n demo -o jsonpath='{.status.source}'
  SERVICE_IP=\$(kubectl get service $MODEL -n demo -o jsonpath='{.spec.clusterIP}')
  curl -s http://\$SERVICE_IP/generate -H 'Content-Type: application/json' -d '{"text":"hello","sampling_params":{"max_new_tokens":8}}'
Stop it with: make demo-down
MSG
