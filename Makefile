# Everything a newcomer runs goes through here; CI runs `make test` too (.ci/run).
SHELL := /bin/bash
PYTHON_BOOTSTRAP ?= python3
VENV := .venv
MODEL_REPOSITORY ?= model_repository
DEMO_ONNX := model_repository/demo/1/model.onnx
# An NVIDIA GPU on this host: KIND_AUTO instances then run on it, so the venv gets the CUDA stack.
HAS_GPU := $(or $(wildcard /dev/nvidia0),$(shell command -v nvidia-smi 2>/dev/null))
# The ONNX Runtime stack: requirements-cuda.txt (onnxruntime-gpu + torch for the same CUDA) on GPU hosts,
# requirements-cpu.txt elsewhere. STACK=cpu or STACK=cuda overrides the detection.
STACK ?= $(if $(HAS_GPU),cuda,cpu)
# The benchmark's models: the 4096-wide MLP is compute-bound on a GPU; on a CPU the 1024-wide one is mid-size.
BENCH_MODELS ?= $(if $(HAS_GPU),demo mlp4096,demo mlp1024)
BENCH_NAME ?= $(if $(HAS_GPU),gpu,cpu)
# Where the host has CUDA MPS, the benchmark also measures the anchors under it.
BENCH_MPS ?= $(if $(HAS_GPU),$(if $(shell command -v nvidia-cuda-mps-control 2>/dev/null),--mps))
# Where the CPU stack's torch (2.13.0+cpu) comes from when no local wheel has it: PyTorch's CPU index.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

# USE_HOST_PYTHON=1: no venv, no package index. The first python3 on PATH (HOST_PYTHON) is used as it is,
# with its preinstalled torch, ONNX Runtime and nvidia-pytriton (e.g. the GPU test host); the project is
# installed into it (--no-deps --no-index, editable) only if it cannot import this checkout's triton_ort.
USE_HOST_PYTHON ?=
HOST_PYTHON ?= python3
ifneq ($(USE_HOST_PYTHON),)
PYTHON := $(shell command -v $(HOST_PYTHON))
VENV_STAMP := host-python
ENV_READY := host-python
else
PYTHON := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed-$(STACK)
ENV_READY := $(VENV_STAMP)
endif

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-18s %s\n", $$1, $$2}'

# The dev venv runs tritonserver 2.41 from nvidia-pytriton 0.5.0, whose stubs cover Python 3.8-3.11.
define CHECK_BOOTSTRAP
import sys
if not (3, 10) <= sys.version_info[:2] <= (3, 11):
    sys.exit("make: Python %d.%d cannot build the dev venv: nvidia-pytriton 0.5.0 (tritonserver 2.41 = Triton "
             "23.12) has python-backend stubs for 3.8-3.11 only and its pyzmq~=23 has no cp312 wheel. Fix: "
             "PYTHON_BOOTSTRAP=python3.11 make ..., or USE_HOST_PYTHON=1 make ... with a Python that has the "
             "stack preinstalled" % sys.version_info[:2])
endef
export CHECK_BOOTSTRAP

$(VENV)/.installed-%: requirements-dev.txt requirements-%.txt pyproject.toml
	@$(PYTHON_BOOTSTRAP) -c "$$CHECK_BOOTSTRAP"
	$(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	rm -f $(VENV)/.installed-*
	@# never onnxruntime and onnxruntime-gpu together: drop the one a previous stack installed
	$(VENV)/bin/python -m pip uninstall -q -y $(if $(filter cuda,$*),onnxruntime,onnxruntime-gpu) 2>/dev/null || true
	@# CPU stack: torch's CPU build (requirements-cpu.txt), from a local wheel where pip has one, else from
	@# PyTorch's CPU index (PyPI has only the CUDA build, several GB of nvidia-* wheels)
	extra=""; if [ "$*" = cpu ] && ! $(VENV)/bin/python -m pip install -q --dry-run --no-index --no-deps \
	    "$$(grep -m1 '^torch==' requirements-cpu.txt | cut -d' ' -f1)" >/dev/null 2>&1; then \
	  echo "make: torch's CPU build from $(TORCH_CPU_INDEX)"; extra="--extra-index-url $(TORCH_CPU_INDEX)"; fi; \
	$(VENV)/bin/python -m pip install -q -r requirements-dev.txt -r requirements-$*.txt $$extra
	$(VENV)/bin/python -m pip install -q --no-deps -e .
	$(VENV)/bin/python -m triton_ort.stack --expect $*
	touch $@

.PHONY: host-python
host-python:
	@test -n "$(PYTHON)" || { echo "make: USE_HOST_PYTHON: no $(HOST_PYTHON) on PATH. Fix: HOST_PYTHON=/path/to/python3" >&2; exit 1; }
	@# (re)install only if triton_ort is missing or imports from another checkout (the stub would serve that)
	@$(PYTHON) -c "import importlib.util as u, pathlib, sys; s = u.find_spec('triton_ort'); \
	  sys.exit(s is None or pathlib.Path(s.origin).resolve().parent != pathlib.Path('$(CURDIR)/src/triton_ort'))" \
	  || $(PYTHON) -m pip install -q --no-deps --no-index --no-build-isolation -e .
	@$(PYTHON) -m triton_ort.stack --expect $(STACK)

.PHONY: venv
venv: $(ENV_READY) ## create the virtual environment (.venv): CPU stack, or the CUDA stack on GPU hosts

# Triton's perf_analyzer 2.41, the load engine of `triton-ort perf` and `tune`: the binary of PyPI's tritonclient
# 2.41.0 wheel with libcudart (PyPI) and libb64 (Debian) beside it, behind a wrapper next to the venv's python
# (triton_ort.cli.perf_analyzer.find_perf_analyzer looks there, then on PATH).
PERF_ANALYZER := $(dir $(PYTHON))perf_analyzer
PERF_ANALYZER_LIB ?= $(if $(USE_HOST_PYTHON),.tools/perf_analyzer,$(VENV)/lib/perf_analyzer)

$(PERF_ANALYZER): scripts/install_perf_analyzer.sh | $(ENV_READY)
	scripts/install_perf_analyzer.sh $(PYTHON) $(PERF_ANALYZER_LIB) $(dir $(PYTHON))

.PHONY: perf-analyzer
perf-analyzer: $(PERF_ANALYZER) ## install Triton's perf_analyzer 2.41 beside the venv's python (perf and tune measure with it)

.PHONY: gpu-stack-check
gpu-stack-check: $(ENV_READY) ## show that requirements-cuda.txt resolves for CPython 3.10, 3.11, 3.12 (pip --dry-run, PyPI)
	$(PYTHON) scripts/resolve_stack.py requirements-cuda.txt --with numpy==1.26.4

$(DEMO_ONNX): scripts/build_models.py $(if $(USE_HOST_PYTHON),,$(VENV_STAMP)) | $(ENV_READY)
	$(PYTHON) scripts/build_models.py --out model_repository --models demo

.PHONY: models
models: $(DEMO_ONNX) ## export the demo model to ONNX (deterministic)

.PHONY: run
run: models ## start the local tritonserver, check one HTTP and one gRPC answer against in-process ORT, stop
	$(PYTHON) -m client.smoke --local --model-repository model_repository --model demo

# make serve HTTP_PORT=18000 GRPC_PORT=18001 METRICS_PORT=18002: another set of ports (all on 127.0.0.1).
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002

.PHONY: serve
serve: models ## run the local tritonserver in the foreground on $(MODEL_REPOSITORY) (HTTP_PORT/GRPC_PORT/METRICS_PORT, default 8000/8001/8002; MPS=1: under CUDA MPS)
	$(PYTHON) -m triton_ort.cli serve --model-repository $(MODEL_REPOSITORY) \
		--http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT) $(if $(filter 1,$(MPS)),--mps)

.PHONY: bench
bench: $(VENV_STAMP) ## benchmark ours against the floor, naive and PyTriton anchors (results/, plot)
	rm -rf bench_repository
	$(PYTHON) scripts/build_models.py --bench --out bench_repository --models $(BENCH_MODELS)
	$(PYTHON) -m client.bench --models $(BENCH_MODELS) --profile $(BENCH_MPS) --out results/bench-$(BENCH_NAME).json
	$(PYTHON) -m client.bench_plot results/bench-$(BENCH_NAME).json results/bench-$(BENCH_NAME).png

.PHONY: bench-pipelines
bench-pipelines: $(VENV_STAMP) ## four pipelines served four ways: hooked, ensemble, BLS, naive (docs/pipelines.md)
	$(PYTHON) -m client.bench_pipelines --out results/pipelines-$(BENCH_NAME).json

.PHONY: bench-hooks
bench-hooks: models ## what pre/post-processing hooks cost per execute, in-process (diagnostics/README.md)
	$(PYTHON) -m diagnostics.bench_hooks --json results/bench-hooks-$(BENCH_NAME).json

.PHONY: soak
soak: models ## the long soak: 600k good and malformed requests at concurrency 64, answers and memory checked
	mkdir -p results
	$(PYTHON) -m client.soak --local --model-repository $(MODEL_REPOSITORY) --requests 600000 --duration 900 \
		--warmup 60000 --json results/soak.json

.PHONY: audit
audit: $(VENV_STAMP) ## dependency audit of every pinned requirement (pip-audit; needs the vulnerability service)
	$(PYTHON) -m pip install -q pip-audit==2.10.1
	mkdir -p results
	$(PYTHON) -m pip freeze --exclude-editable > results/audit-requirements.txt
	for r in results/audit-requirements.txt docker/requirements-gpu.txt docker/requirements-client.txt; do \
	  $(PYTHON) -m pip_audit --strict --no-deps --disable-pip --progress-spinner off -s osv -r $$r || exit 1; done

.PHONY: lint
lint: $(VENV_STAMP) ## ruff and mypy
	$(PYTHON) -m ruff check src client diagnostics scripts tests model_repository docker/checks
	$(PYTHON) -m ruff format --check src client diagnostics scripts tests model_repository docker/checks
	$(PYTHON) -m mypy

.PHONY: test
test: models lint docker-lint perf-analyzer ## lint (code and docker/), unit and integration tests (GPU tests need CUDA)
	$(PYTHON) -m pytest -q tests --ignore=tests/container --ignore=tests/model_analyzer

# The tiers, each under pytest-timeout (a limit per test, so a hung server fails the test instead of CI).
.PHONY: test-unit
test-unit: $(ENV_READY) ## unit tests only: the library and the harness, no server (seconds)
	$(PYTHON) -m pytest -q --timeout=60 tests/unit

.PHONY: test-integration
test-integration: models perf-analyzer ## integration tests: the real tritonserver through tritonclient (about a minute)
	$(PYTHON) -m pytest -q --timeout=300 tests/integration

.PHONY: test-reliability
test-reliability: models ## reliability tests: malformed requests, faults, load on the real server (minutes)
	$(PYTHON) -m pytest -q --timeout=600 tests/reliability

# The EXECUTION_ENV_PATH recipe (docs/execution-env.md). For a stock Triton 23.12 image (Python 3.10, CUDA 12.3):
# make pack-env PACK_STACK=cuda PACK_REQUIREMENTS=docker/requirements-gpu.txt PACK_PYTHON=python3.10 \
#   PACK_TARGET_PREFIX=/usr PACK_OUT=model_repository/demo/env.tar.gz
# PACK_STACK is the archive's stack, independent of this host's venv (STACK).
PACK_STACK ?= $(STACK)
PACK_REQUIREMENTS ?=
PACK_PYTHON ?= $(PYTHON)
PACK_TARGET_PREFIX ?=
PACK_OUT ?= env.tar.gz

.PHONY: pack-env
pack-env: $(ENV_READY) ## pack torch, ONNX Runtime and triton_ort for EXECUTION_ENV_PATH (PACK_STACK, PACK_REQUIREMENTS, PACK_PYTHON, PACK_TARGET_PREFIX, PACK_OUT)
	$(PYTHON) scripts/pack_env.py --stack $(PACK_STACK) --python $(PACK_PYTHON) --out $(PACK_OUT) \
		$(if $(PACK_REQUIREMENTS),--requirements $(PACK_REQUIREMENTS)) \
		$(if $(PACK_TARGET_PREFIX),--target-prefix $(PACK_TARGET_PREFIX))

.PHONY: test-execution-env
test-execution-env: models ## the EXECUTION_ENV_PATH recipe alone: pack the CPU stack, serve a model from it (about 70 s)
	$(PYTHON) -m pytest -q --timeout=600 tests/integration/test_execution_env.py

.PHONY: test-deploy
test-deploy: $(ENV_READY) ## the Kubernetes manifests' tests, with rclone (Debian) and moto (PyPI) for the model copy's two runs
	@command -v rclone >/dev/null || { apt-get update -qq && apt-get install -y -qq rclone; }
	@$(PYTHON) -c "import moto.server" 2>/dev/null || $(PYTHON) -m pip install -q "moto[server]==5.2.5"
	$(PYTHON) -m pytest -q tests/deploy

# Model Analyzer in a venv of its own (its pins are not the project's: tritonclient, numpy), driving our
# server through triton-ort-tritonserver and perf_analyzer (docs/model-analyzer.md).
MODEL_ANALYZER_VENV := .venv-model-analyzer
MODEL_ANALYZER_VERSION := 1.58.0

$(MODEL_ANALYZER_VENV)/bin/model-analyzer:
	$(PYTHON_BOOTSTRAP) -m venv $(MODEL_ANALYZER_VENV)
	$(MODEL_ANALYZER_VENV)/bin/python -m pip install -q "triton-model-analyzer==$(MODEL_ANALYZER_VERSION)"

.PHONY: test-model-analyzer
test-model-analyzer: models perf-analyzer $(MODEL_ANALYZER_VENV)/bin/model-analyzer ## Model Analyzer profiles the demo through triton-ort-tritonserver (its own venv, about 4 minutes)
	PATH="$(abspath $(dir $(PERF_ANALYZER))):$$PATH" MODEL_ANALYZER=$(CURDIR)/$(MODEL_ANALYZER_VENV)/bin/model-analyzer \
	  $(PYTHON) -m pytest -q -rs tests/model_analyzer

.PHONY: test-gpu
test-gpu: models ## the GPU tests alone (on a CUDA host)
	$(PYTHON) -m pytest -q -m gpu tests

.PHONY: clean
clean: ## remove the venv, generated models and caches
	rm -rf $(VENV) $(MODEL_ANALYZER_VENV) $(DEMO_ONNX) bench_repository results .pytest_cache .ruff_cache .mypy_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

include docker/docker.mk
