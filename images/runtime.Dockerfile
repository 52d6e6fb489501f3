# The Kvant runtime: SGLang plus Kvant's cli, contracts, kernels and runtime packages. It runs the converter,
# calibrator, evaluator, SGLang launcher, gate and simulator (`kvant convert|launch|gate|sim …`).
# Build from the repository root:
#   docker build -f images/runtime.Dockerfile -t ghcr.io/kvant-dev/kvant-runtime:0.1.0 .
# The repository name (kvant-runtime) is the key the local node agent and the chart use.

FROM lmsysorg/sglang:v0.5.23-cu129
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /opt/kvant
COPY constraints.txt ./
COPY cli/ cli/
COPY contracts/ contracts/
COPY kernels/ kernels/
COPY runtime/ runtime/
# --no-deps: SGLang's image already carries torch, transformers, safetensors, compressed-tensors,
# aiohttp, numpy and prometheus-client built for its CUDA, and the tokenizer and image libraries the
# gate loads as SGLang does (sentencepiece, tiktoken, pillow); reinstalling them would replace its torch.
# The import check fails the build if one of them is missing.
# numba (the converter's INT4 kernel) is the one addition; its kernels are compiled here, into the
# package's on-disk cache, so no converter pod pays the compile.
RUN pip install --no-cache-dir --no-deps -c constraints.txt numba llvmlite ./cli ./contracts ./kernels ./runtime \
    && python -c "import kvant_runtime.runtime_commands, kvant_kernels, compressed_tensors, safetensors, aiohttp, yaml, prometheus_client, sentencepiece, tiktoken, PIL" \
    && python -c "import numpy as np; from kvant_kernels.int4 import quantize_pack; \
quantize_pack(np.zeros((1, 32), np.uint16), 'BF16', 32); quantize_pack(np.zeros((1, 32), np.float32), 'F32', 32, 'BF16')" \
    && kvant --help > /dev/null
ENTRYPOINT ["kvant"]
