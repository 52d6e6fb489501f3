# The Kvant operator: `kvant run` (kopf). Slim Python with the cli, contracts and operator packages only:
# no torch, no CUDA. Build from the repository root:
#   docker build -f images/operator.Dockerfile -t ghcr.io/kvant-dev/kvant-operator:0.1.0 .
# The repository name (kvant-operator) is the key the local node agent and the chart use.

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY constraints.txt ./
COPY cli/ cli/
COPY contracts/ contracts/
COPY operator/ operator/
# Wheels for the three packages and exactly their pinned dependencies.
RUN pip wheel --no-cache-dir --wheel-dir /wheels --constraint constraints.txt ./cli ./contracts ./operator

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels kvant-cli==0.1.0 kvant-contracts==0.1.0 kvant-operator==0.1.0 \
    && python -c "import kvant_operator.handlers, sys; sys.exit('torch' in sys.modules)"
# The chart runs it as 65532 with a read-only root filesystem; nothing here needs to write.
USER 65532:65532
ENTRYPOINT ["kvant", "run"]
