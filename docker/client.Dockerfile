# syntax=docker/dockerfile:1
# The smoke client: one HTTP and one gRPC request, checked against in-process ONNX Runtime (CPU);
# exits non-zero on a wrong answer. Build from the repository root:
#   docker build -f docker/client.Dockerfile -t triton-ort/client .
# The model repository (for the reference answer) is mounted at /models; see docker/compose.yaml.
FROM python:3.11-slim-bookworm

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

WORKDIR /app

COPY docker/requirements-client.txt /tmp/requirements-client.txt
RUN python -m pip install --no-cache-dir --only-binary=:all: --requirement /tmp/requirements-client.txt \
 && rm /tmp/requirements-client.txt

COPY client/ client/

RUN useradd --create-home --uid 1000 --user-group smoke
USER 1000:1000

ENTRYPOINT ["python", "-m", "client.smoke"]
CMD ["--http-url", "triton:8000", "--grpc-url", "triton:8001", "--model-repository", "/models", "--model", "demo"]
