"""The one rule set for what docker/ ships, as pure functions over file text and compose configuration.

docker/checks/lint.py (`make docker-lint`) applies them to the real files; tests/reliability/test_security.py
applies the security ones; tests/docker/test_rules.py proves that each deliberately broken variant of the
real files is reported. Every function returns a list of problems, empty when the input is right.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from common import ORT_CPU, ORT_GPU, ORT_MODULE_DISTRIBUTIONS, read_pins, requirement_lines, version_tuple

BASE_IMAGE = "nvcr.io/nvidia/tritonserver:23.12-py3"
SERVER_IMAGE = "triton-ort/server:23.12"
PORTS = {8000, 8001, 8002}
# Triton's --exit-timeout-secs default; the entrypoint passes TRITON_EXIT_TIMEOUT_S (default the same).
TRITON_EXIT_TIMEOUT_S = 30
# What Docker must leave tritonserver after the exit timeout: the stubs unload, the process exits.
STOP_GRACE_MARGIN_S = 10


# ---------------------------------------------------------------- Dockerfiles


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    kept = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    result = []
    for line in re.sub(r"\\\n", " ", kept).splitlines():
        parts = line.strip().split(None, 1)
        if parts:
            result.append((parts[0].upper(), parts[1] if len(parts) > 1 else ""))
    return result


def base_images(text: str) -> list[str]:
    """The images of every FROM, with ARG defaults substituted."""
    steps = instructions(text)
    args = dict(a.split("=", 1) for i, a in steps if i == "ARG" and "=" in a)
    images = []
    for instruction, arguments in steps:
        if instruction == "FROM":
            words = [w for w in arguments.split() if not w.startswith("--")]
            images.append(re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), words[0]))
    return images


def container_problems(name: str, text: str) -> list[str]:
    """Security, for any Dockerfile: it ends as a non-root USER, and every base image is pinned to a
    version (a digest, or a tag with a number that is not 'latest')."""
    problems = []
    steps = instructions(text)
    users = [a.strip() for i, a in steps if i == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append(f"{name}: must end up running as a non-root USER (last USER: {users[-1:]})")
    for image in base_images(text):
        tag = image.rsplit("@", 1)[-1] if "@" in image else image.rsplit(":", 1)[-1]
        if ("@" not in image and ":" not in image) or tag == "latest" or not re.search(r"\d", tag):
            problems.append(f"{name}: FROM {image} is not pinned to a version")
    return problems


def _pip_installs(run: str) -> list[list[str]]:
    commands = []
    for command in re.split(r"&&|;|\|\|", run):
        words = command.split()
        if "pip" in " ".join(words) and "install" in words and "uninstall" not in words:
            commands.append(words)
    return commands


def _installs_cpu_onnxruntime(run: str) -> bool:
    for words in _pip_installs(run):
        for word in words:
            if re.split(r"[=<>!~\[;]", word.strip("'\""), maxsplit=1)[0].lower() == ORT_CPU:
                return True
    return False


def _requirements_installed_with_hashes(runs: list[str], requirements: str) -> list[str]:
    installs = [w for run in runs for w in _pip_installs(run) if any(requirements in x for x in w)]
    if not installs:
        return [f"the pinned docker/{requirements} is not installed"]
    if not all("--require-hashes" in words for words in installs):
        return [f"docker/{requirements} must be installed with --require-hashes"]
    return []


def dockerfile_problems(text: str) -> list[str]:
    """docker/Dockerfile, the server image."""
    problems = container_problems("Dockerfile", text)
    steps = instructions(text)
    images = base_images(text)
    if not images or images[0] != BASE_IMAGE:
        problems.append(f"Dockerfile: FROM {images[:1]}, expected {BASE_IMAGE}")
    health = [a for i, a in steps if i == "HEALTHCHECK"]
    if not health or "triton_ort.probe" not in health[-1] or "--require-ready" not in health[-1]:
        problems.append("Dockerfile: needs a HEALTHCHECK that runs triton_ort.probe --require-ready")
    runs = [a for i, a in steps if i == "RUN"]
    if any(_installs_cpu_onnxruntime(run) for run in runs):
        problems.append("Dockerfile: installs the CPU 'onnxruntime' (it shadows onnxruntime-gpu)")
    # The stack is a build argument (cpu for a base without CUDA); its default must be the GPU stack.
    stack_default = re.search(r"^ARG STACK=(\S+)", text, re.MULTILINE)
    requirements = "requirements-gpu.txt"
    if stack_default:
        requirements = "requirements-${STACK}.txt"
        if stack_default.group(1) != "gpu":
            problems.append(f"Dockerfile: ARG STACK defaults to {stack_default.group(1)}, not gpu")
    problems += [f"Dockerfile: {p}" for p in _requirements_installed_with_hashes(runs, requirements)]
    project = [run for run in runs if "pip install" in run and re.search(r"\s\.(\s|$)", run)]
    if not project:
        problems.append("Dockerfile: the project itself (pip install .) is not installed")
    elif not all("--no-deps" in run for run in project):
        problems.append("Dockerfile: the project must be installed with --no-deps (its deps are the pins)")
    selfcheck = [run for run in runs if "image_selfcheck.py" in run]
    if not selfcheck:
        problems.append("Dockerfile: docker/checks/image_selfcheck.py must run at build time")
    elif not all("--entrypoint" in run for run in selfcheck):
        problems.append("Dockerfile: the self-check must probe the entrypoint's environment (--entrypoint)")
    for instruction, arguments in steps:
        if instruction != "ENV" or "LD_LIBRARY_PATH" not in arguments:
            continue
        folders = re.findall(r"nvidia/([\w.-]+)/lib", arguments)
        if [f for f in folders if f != "cudnn"]:
            problems.append(
                f"Dockerfile: pip's nvidia/{{{','.join(folders)}}}/lib on LD_LIBRARY_PATH; only cuDNN's "
                "may be there (pip cuBLAS/cudart would displace the image's CUDA 12.3 under Triton's "
                "backends)"
            )
        if "backends/onnxruntime" in arguments:
            problems.append("Dockerfile: Triton's ORT backend folder on LD_LIBRARY_PATH (ORT 1.16.3)")
    return problems


def client_dockerfile_problems(text: str) -> list[str]:
    """docker/client.Dockerfile, the smoke client. That it runs client.smoke against the server image's
    /models is what tests/container's smoke run shows."""
    problems = container_problems("client.Dockerfile", text)
    steps = instructions(text)
    runs = [a for i, a in steps if i == "RUN"]
    problems += [
        f"client.Dockerfile: {p}"
        for p in _requirements_installed_with_hashes(runs, "requirements-client.txt")
    ]
    return problems


# ---------------------------------------------------------------- entrypoint


def entrypoint_problems(text: str) -> list[str]:
    """docker/entrypoint.sh: what only a GPU host runs, the CUDA memory pool. The rest of its command line
    (model control off, restricted logging/trace APIs, the exit timeout, exec, the cleaned library path)
    is read from the running tritonserver by tests/container."""
    if "--cuda-memory-pool-byte-size" not in text:
        return ["entrypoint.sh: lacks --cuda-memory-pool-byte-size"]
    return []


# ---------------------------------------------------------------- requirements


def pin_problems(path: Path, require_hashes: bool) -> list[str]:
    """Every requirement (and those of files it includes) is an exact pin; with hashes where required."""
    pins, problems = read_pins(path)
    if require_hashes:
        unhashed = [
            line.requirement
            for line in requirement_lines(path)
            if line.requirement and not any(o.startswith("--hash") for o in line.options)
        ]
        if unhashed:
            problems.append(
                f"{path.name}: {len(unhashed)} requirements without --hash (e.g. {unhashed[:3]}); "
                "regenerate it with `make docker-lock`"
            )
        if not pins:
            problems.append(f"{path.name}: pins nothing")
    return problems


def requirements_problems(gpu_path: Path, client_path: Path) -> list[str]:
    """The two images' requirements: fully pinned with hashes, one ORT distribution each, numpy < 2."""
    problems = pin_problems(gpu_path, require_hashes=True) + pin_problems(client_path, require_hashes=True)
    gpu, _ = read_pins(gpu_path)
    client, _ = read_pins(client_path)
    ort = sorted(name for name in gpu if ORT_MODULE_DISTRIBUTIONS.match(name))
    if ort != [ORT_GPU]:
        problems.append(
            f"{gpu_path.name}: distributions of the 'onnxruntime' module {ort}; only {ORT_GPU} allowed"
        )
    for needed in ("torch", "numpy", "onnx"):
        if needed not in gpu:
            problems.append(f"{gpu_path.name}: {needed} is not pinned")
    if "numpy" in gpu and version_tuple(gpu["numpy"].version)[:1] >= (2,):
        problems.append(f"{gpu_path.name}: numpy {gpu['numpy'].version}; the 23.12 stub needs numpy < 2")
    if ORT_GPU in client:
        problems.append(f"{client_path.name}: the client needs no onnxruntime-gpu")
    for needed in ("tritonclient", "numpy", ORT_CPU):
        if needed not in client:
            problems.append(f"{client_path.name}: {needed} is not pinned")
    return problems


# ---------------------------------------------------------------- compose (normalised configuration)


def duration_s(value: Any) -> float:
    """Compose durations ("1m30s", "45s", "500ms") in seconds; -1 when unparsable or missing."""
    if value is None:
        return -1
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "ns": 1e-9}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|ns|m|s)", str(value))
    if not parts or "".join(a + b for a, b in parts) != str(value):
        return -1
    return sum(float(number) * units[unit] for number, unit in parts)


def _ulimit(value: Any) -> tuple[int, int] | None:
    if isinstance(value, dict):
        return int(value.get("soft", 0)), int(value.get("hard", 0))
    if value is None:
        return None
    return int(value), int(value)


def model_mount(service: dict[str, Any]) -> dict[str, Any] | None:
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict) and volume.get("target") == "/models":
            return volume
    return None


def port_problems(config: dict[str, Any]) -> list[str]:
    """Security: every published port is bound to 127.0.0.1 (the endpoints have no authentication)."""
    problems = []
    for name, service in (config.get("services") or {}).items():
        for port in service.get("ports") or []:
            if port.get("host_ip") != "127.0.0.1":
                problems.append(f"{name}: port {port.get('published')} is published beyond 127.0.0.1")
    return problems


def local_compose_problems(config: dict[str, Any]) -> list[str]:
    """`make up-local`'s variant (compose.yaml + compose.cpu.yaml + compose.local.yaml): no build (the images
    are built with BuildKit beforehand), host networking for both services, no published ports, and the
    server bound to 127.0.0.1 (with host networking nothing else keeps its unauthenticated ports local)."""
    problems = []
    services = config.get("services") or {}
    for name in ("triton", "client"):
        service = services.get(name) or {}
        if service.get("network_mode") != "host":
            problems.append(f"{name}: network_mode must be host (no bridge network on such machines)")
        if service.get("build"):
            problems.append(f"{name}: must not build (without buildx compose uses the classic builder)")
        if service.get("ports"):
            problems.append(f"{name}: publishes ports with host networking")
    bind = ((services.get("triton") or {}).get("environment") or {}).get("TRITON_BIND_ADDRESS")
    if bind != "127.0.0.1":
        problems.append(f"triton: TRITON_BIND_ADDRESS must be 127.0.0.1 with host networking, is {bind!r}")
    return problems


def compose_problems(config: dict[str, Any], gpu: bool, mounted: bool = False) -> list[str]:
    """What deployment needs from the normalised compose configuration (`config --format json`). `gpu`:
    the GPU variant (not compose.cpu.yaml); `mounted`: with compose.models.yaml (a host repository)."""
    services = config.get("services") or {}
    triton = services.get("triton")
    client = services.get("client")
    if triton is None or client is None:
        return [f"services 'triton' and 'client' are required, found {sorted(services)}"]
    problems = port_problems(config)
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
    ulimits = triton.get("ulimits") or {}
    if _ulimit(ulimits.get("memlock")) != (-1, -1):
        problems.append(f"triton: ulimits.memlock must be -1, is {ulimits.get('memlock')!r}")
    if _ulimit(ulimits.get("stack")) != (67108864, 67108864):
        problems.append(f"triton: ulimits.stack must be 67108864, is {ulimits.get('stack')!r}")
    published = {int(port.get("target", 0)) for port in triton.get("ports") or []}
    if published != PORTS:
        problems.append(
            f"triton: publishes {sorted(published)}, expected {sorted(PORTS)} (HTTP, gRPC, metrics)"
        )
    exit_timeout = float(
        (triton.get("environment") or {}).get("TRITON_EXIT_TIMEOUT_S", TRITON_EXIT_TIMEOUT_S)
    )
    grace = duration_s(triton.get("stop_grace_period"))
    if grace < exit_timeout + STOP_GRACE_MARGIN_S:
        problems.append(
            f"triton: stop_grace_period {triton.get('stop_grace_period')!r} must be at least Triton's exit "
            f"timeout ({exit_timeout:g} s) + {STOP_GRACE_MARGIN_S} s, or Docker kills in-flight requests"
        )
    for name, service in (("triton", triton), ("client", client)):
        mount = model_mount(service)
        if mounted and mount is None:
            problems.append(f"{name}: compose.models.yaml does not mount the repository at /models")
        elif mount is not None and not mounted:
            problems.append(f"{name}: mounts {mount.get('source')} over /models by default (opt-in only)")

    health_test = " ".join(str(word) for word in (triton.get("healthcheck") or {}).get("test") or [])
    if "triton_ort.probe" not in health_test or "--require-ready" not in health_test:
        problems.append(
            f"triton: the healthcheck must run triton_ort.probe --require-ready (a probe that infers), has "
            f"{health_test!r}"
        )
    condition = ((client.get("depends_on") or {}).get("triton") or {}).get("condition")
    if condition != "service_healthy":
        problems.append(f"client: must wait for a healthy triton (depends_on condition), has {condition!r}")
    command = " ".join(client.get("command") or [])
    for flag in ("--http-url", "--grpc-url", "--model-repository"):
        if flag not in command:
            problems.append(f"client: command lacks {flag}")
    build = client.get("build") or {}
    if not str(build.get("dockerfile", "")).endswith("docker/client.Dockerfile"):
        problems.append("client: must be built from docker/client.Dockerfile")
    if (build.get("additional_contexts") or {}).get(SERVER_IMAGE) != "service:triton":
        problems.append(
            f"client: build.additional_contexts must map {SERVER_IMAGE} to service:triton (its /models)"
        )
    return problems


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


def render_compose(
    command: list[str], project_dir: Path, files: list[Path], env: dict[str, str] | None = None
) -> tuple[dict[str, Any] | None, str]:
    """(`config --format json` of the files, "") or (None, why compose rejected them)."""
    base = [*command, "--project-directory", str(project_dir)]
    for file in files:
        base += ["-f", str(file)]
    quiet = subprocess.run([*base, "config", "--quiet"], capture_output=True, text=True, env=env, check=False)
    if quiet.returncode != 0:
        return None, (quiet.stderr + quiet.stdout).strip()
    rendered = subprocess.run(
        [*base, "config", "--format", "json"], capture_output=True, text=True, env=env, check=False
    )
    if rendered.returncode != 0:
        return None, rendered.stderr.strip()
    config: dict[str, Any] = json.loads(rendered.stdout)
    return config, ""
