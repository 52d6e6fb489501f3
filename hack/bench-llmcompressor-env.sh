#!/usr/bin/env bash
# Creates (once) a bench-only virtualenv with llm-compressor, outside the repo, and prints its python.
#
# Used by bench/accuracy/gptq.py to run llm-compressor's GPTQ next to Kvant's. It is separate from the
# project venv (hack/venv.sh) because llm-compressor pins older torch/transformers than Kvant uses.
# Every package is pinned exactly (resolved with `pip install --dry-run --report` for llmcompressor
# 0.14.0.1 on CPython 3.11, linux x86_64), and the folder is keyed by the llm-compressor version and a
# hash of the pins: ${KVANT_CACHE:-~/.cache/kvant}/bench-llmcompressor-<version>-<hash>/. A lock makes
# concurrent callers build it once; `.complete` marks a finished build (an interrupted one is redone).
# torch comes from the default index (its CUDA build: several GB of nvidia-* wheels; the bench uses
# the CPU only). Cold: several minutes of downloads; warm: instant.
set -euo pipefail
CACHE="${KVANT_CACHE:-$HOME/.cache/kvant}"
PY="${PYTHON:-python3.11}"
VERSION="0.14.0.1"
PIP_PIN="pip==26.3"
PINS="
accelerate==1.15.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
auto-round==0.15.1
certifi==2026.10.19.post1
charset-normalizer==3.5.3
click==8.5.1
compressed-tensors==0.19.0
cuda-bindings==13.5.0
cuda-pathfinder==1.9.1
cuda-toolkit==13.0.3.0
datasets==5.2.0
dill==0.4.1
filelock==4.3.1
fsspec==2026.9.0
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpx==0.28.1
huggingface_hub==1.33.0
idna==3.20
Jinja2==3.1.6
llmcompressor==$VERSION
loguru==0.7.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
mdurl==0.1.2
mpmath==1.3.0
multiprocess==0.70.19
networkx==3.6.1
numpy==2.4.6
nvidia-cublas==13.1.1.3
nvidia-cuda-cupti==13.0.85
nvidia-cuda-nvrtc==13.0.88
nvidia-cuda-runtime==13.0.96
nvidia-cudnn-cu13==9.24.0.43
nvidia-cufft==12.0.0.61
nvidia-cufile==1.15.1.6
nvidia-curand==10.4.0.35
nvidia-cusolver==12.0.4.66
nvidia-cusparse==12.6.3.3
nvidia-cusparselt-cu13==0.8.1
nvidia-ml-py==13.615.71
nvidia-nccl-cu13==2.30.7
nvidia-nvjitlink==13.5.37
nvidia-nvshmem-cu13==3.4.5
nvidia-nvtx==13.0.85
packaging==26.4
pandas==3.1.1
pillow==13.0.0
psutil==7.2.2
py-cpuinfo==9.0.0
pyarrow==26.0.1
pydantic==2.14.4
pydantic_core==2.50.5
Pygments==2.21.0
python-dateutil==4.0.0
PyYAML==6.0.4
regex==2026.11.19
requests==2.34.2
rich==15.0.0
safetensors==0.8.0
setuptools==84.2.1
shellingham==1.5.4
sympy==1.14.0
tokenizers==0.23.3
torch==2.14.0
tqdm==4.70.1
transformers==5.17.0
triton==3.8.0
typer==0.29.2
typing-inspection==0.4.5
typing_extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
xxhash==4.1.0
"
key=$(printf '%s\n%s\n%s\n' "$PY" "$PIP_PIN" "$PINS" | sha256sum | cut -c1-12)
VENV="$CACHE/bench-llmcompressor-$VERSION-$key"
mkdir -p "$CACHE"
exec 9>"$CACHE/bench-llmcompressor.lock"
flock 9  # one build at a time; a concurrent caller waits and then reuses it
if [[ ! -f "$VENV/.complete" ]]; then
  echo "[bench-llmcompressor] creating $VENV (cold: several minutes, torch and its CUDA wheels are large)" >&2
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q "$PIP_PIN" >&2
  # shellcheck disable=SC2086  # one argument per pin
  "$VENV/bin/pip" install --progress-bar off --no-deps $PINS >&2
  "$VENV/bin/pip" check >&2
  touch "$VENV/.complete"
fi
echo "$VENV/bin/python"
