# Everything a newcomer runs goes through here; CI runs `make test` too (.ci/run).
SHELL := /bin/bash
PYTHON_BOOTSTRAP ?= python3
VENV := .venv
PYTHON := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed
MODEL_REPOSITORY ?= model_repository
DEMO_ONNX := model_repository/demo/1/model.onnx
# The benchmark's models: the 4096-wide MLP is compute-bound on a GPU; on a CPU the 1024-wide one is mid-size.
HAS_GPU := $(wildcard /dev/nvidia0)
BENCH_MODELS ?= $(if $(HAS_GPU),demo mlp4096,demo mlp1024)
BENCH_NAME ?= $(if $(HAS_GPU),gpu,cpu)

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-18s %s\n", $$1, $$2}'

$(VENV_STAMP): requirements-dev.txt pyproject.toml
	$(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -r requirements-dev.txt
	$(PYTHON) -m pip install -q --no-deps -e .
	touch $@

.PHONY: venv
venv: $(VENV_STAMP) ## create the virtual environment (.venv) with pinned packages

$(DEMO_ONNX): scripts/build_models.py $(VENV_STAMP)
	$(PYTHON) scripts/build_models.py --out model_repository --models demo

.PHONY: models
models: $(DEMO_ONNX) ## export the demo model to ONNX (deterministic)

.PHONY: run
run: models ## start the local tritonserver, check one HTTP and one gRPC answer against in-process ORT, stop
	$(PYTHON) -m client.smoke --local --model-repository model_repository --model demo

.PHONY: serve
serve: models ## run the local tritonserver in the foreground on $(MODEL_REPOSITORY) (ports 8000/8001/8002)
	$(PYTHON) -m triton_ort.local_server --model-repository $(MODEL_REPOSITORY)

.PHONY: bench
bench: $(VENV_STAMP) ## benchmark ours against the floor, naive and PyTriton anchors (results/, plot)
	rm -rf bench_repository
	$(PYTHON) scripts/build_models.py --bench --out bench_repository --models $(BENCH_MODELS)
	$(PYTHON) -m client.bench --models $(BENCH_MODELS) --profile --out results/bench-$(BENCH_NAME).json
	$(PYTHON) -m client.bench_plot results/bench-$(BENCH_NAME).json results/bench-$(BENCH_NAME).png

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
	$(PYTHON) -m ruff check src client scripts tests model_repository docker/checks
	$(PYTHON) -m ruff format --check src client scripts tests model_repository docker/checks
	$(PYTHON) -m mypy

.PHONY: test
test: models lint docker-lint ## lint (code and docker/), unit and integration tests (GPU tests need CUDA)
	$(PYTHON) -m pytest -q tests

.PHONY: test-gpu
test-gpu: models ## the GPU tests alone (on a CUDA host)
	$(PYTHON) -m pytest -q -m gpu tests

.PHONY: clean
clean: ## remove the venv, generated models and caches
	rm -rf $(VENV) $(DEMO_ONNX) bench_repository results .pytest_cache .ruff_cache .mypy_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

include docker/docker.mk
