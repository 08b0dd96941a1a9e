"""docker/engine.sh says what it will change on the host (packages, files, a daemon) before it changes it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.container.conftest import REPO

ENGINE = str(REPO / "docker/engine.sh")


def _engine(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The script as a shell runs it: without the DOCKER that `make test-container` exports, so it picks
    the CLI itself."""
    base = {k: v for k, v in os.environ.items() if k != "DOCKER"}
    return subprocess.run([ENGINE, *args], env={**base, **env}, capture_output=True, text=True, timeout=300)


def test_plan_lists_every_change_of_a_bare_host(tmp_path: Path) -> None:
    """A host with no engine, no Compose plugin and no debootstrap: `plan` lists each, and changes nothing."""
    env = {
        "DOCKERD": str(tmp_path / "absent/dockerd"),
        "DOCKER_HOST": f"unix://{tmp_path}/absent.sock",
        "DOCKER_CONFIG": str(tmp_path / "config"),
        "ENGINE_STANDIN": "1",
        # debootstrap lives in /usr/sbin
        "PATH": ":".join(p for p in os.environ["PATH"].split(":") if not p.endswith("sbin")),
    }
    result = _engine("plan", env=env)
    print(result.stderr)
    assert result.returncode == 0, result.stderr
    plan = result.stderr
    for change in ("apt-get install docker.io", "apt-get install debootstrap", f"start {env['DOCKERD']}"):
        assert change in plan, change
    assert f"write {tmp_path}/config/cli-plugins/docker-compose" in plan
    assert not (tmp_path / "config").exists()


def test_a_run_announces_the_compose_plugin_before_it_writes_it(tmp_path: Path) -> None:
    """The real thing, confined to a temporary DOCKER_CONFIG: the engine runs, the plugin is missing there."""
    plugin = tmp_path / "cli-plugins/docker-compose"
    result = _engine("true", env={"DOCKER_CONFIG": str(tmp_path)})
    print(result.stderr)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    announced = next(i for i, line in enumerate(lines) if f"write {plugin}" in line)
    installing = next(i for i, line in enumerate(lines) if "installing the Compose plugin" in line)
    assert announced < installing
    assert plugin.is_file()
    # The CLI it names can build with BuildKit (the docker on PATH only where it has buildx).
    cli = next(line for line in lines if "docker CLI:" in line).split("docker CLI: ")[1].split(" (")[0]
    builds = subprocess.run([cli, "buildx", "version"], capture_output=True).returncode == 0
    version = subprocess.run(
        [cli, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True
    )
    assert builds or int(version.stdout.split(".")[0]) < 23, (cli, version.stdout)
    compose = subprocess.run(
        [cli, "compose", "version"], env={**os.environ, "DOCKER_CONFIG": str(tmp_path)}, capture_output=True
    )
    assert compose.returncode == 0
