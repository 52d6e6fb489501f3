#!/usr/bin/env bash
# Simulates the GPU machine's Python (PyTorch, Triton, transformers and their own requirements,
# nothing else) from a fuller environment: a folder of links to just those packages. With
#   PYTHON="$VENV/bin/python -S" PYTHONPATH=DEST bash e2e/gpu/run.sh --device cpu --small
# the check sees no other package (-S skips site-packages, so numba, compressed-tensors, pydantic and
# an installed kvant are all invisible).
#
#   bash e2e/gpu/minimal_env.sh SITE_PACKAGES DEST
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 SITE_PACKAGES DEST" >&2
  exit 2
fi
SITE=$1
DEST=$2
# Import names (each with its *.dist-info when there is one): the smallest set with which the smoke
# run passes, found by removing packages one at a time (networkx, fsspec, functorch and certifi,
# though PyTorch or huggingface_hub require them, are never imported here). Triton is optional on
# the CPU; the GPU machine has it.
PACKAGES=(
  # PyTorch (torchgen ships in the torch wheel) and what it imports
  torch torchgen typing_extensions sympy mpmath jinja2 markupsafe filelock
  triton
  # transformers and what it imports
  transformers tokenizers safetensors huggingface_hub numpy packaging regex tqdm yaml
  # huggingface_hub's HTTP stack, imported by transformers even offline
  httpx2 httpcore2 anyio h11 idna truststore
)
DISTRIBUTIONS=(pyyaml)  # distribution names that differ from an import name above

rm -rf "$DEST"
mkdir -p "$DEST"
for name in "${PACKAGES[@]}" "${DISTRIBUTIONS[@]}"; do
  found=0
  for path in "$SITE/$name" "$SITE/$name.py" "$SITE/$name.libs" "$SITE/$name"-*.dist-info; do
    if [[ -e $path ]]; then
      ln -s "$path" "$DEST/"
      found=1
    fi
  done
  if [[ $found -eq 0 ]]; then
    echo "minimal_env.sh: $name is not in $SITE" >&2
    exit 1
  fi
done
echo "minimal_env.sh: linked ${#PACKAGES[@]} packages into $DEST"
