# The smoke client: one HTTP and one gRPC request, checked against in-process ONNX Runtime (CPU);
# exits non-zero on a wrong answer. Its reference answer comes from the same ONNX files the server serves:
# /models is copied out of the server image (compose passes the image it builds as the build context
# named triton-ort/server:23.12). Without compose, build the server image first, then from the root:
#   docker build -f docker/client.Dockerfile -t triton-ort/client .
# PYTHON_IMAGE: the base; where no registry can be reached, docker/standin/'s stand-in for it.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM triton-ort/server:23.12 AS server

FROM ${PYTHON_IMAGE}

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

WORKDIR /app

COPY docker/requirements-client.txt /tmp/requirements-client.txt
RUN python -m pip install --no-cache-dir --only-binary=:all: --require-hashes \
      --requirement /tmp/requirements-client.txt \
 && rm /tmp/requirements-client.txt

COPY client/ client/
# The harness the client shares with tests/ (triton_ort.harness); importing it loads no torch.
COPY src/triton_ort/ triton_ort/
COPY --from=server /models /models

RUN useradd --create-home --uid 1000 --user-group smoke
USER 1000:1000

ENTRYPOINT ["python", "-m", "client.smoke"]
CMD ["--http-url", "triton:8000", "--grpc-url", "triton:8001", "--model-repository", "/models", "--model", "demo"]
