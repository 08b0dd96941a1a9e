"""How the models get into the server pods (deploy/kubernetes, docs/kubernetes.md "Getting the models in"):
every overlay fills the volume the server reads its --model-repository from, the fill Job writes the claim
the servers mount, and the rclone command those pieces run copies a repository where the server expects
it (run here with the Debian rclone, from a folder and from an S3 server, moto's, where both are
installed)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from render_manifests import render

from tests.support.paths import ROOT

Manifest = dict[str, Any]

KUBERNETES = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(path.name for path in (KUBERNETES / "overlays").iterdir())
OVERLAY_IDS = [f"overlay-{name}" for name in OVERLAYS]
ENTRYPOINT = (ROOT / "docker" / "entrypoint.sh").read_text()
GUIDE = (ROOT / "docs" / "kubernetes.md").read_text()
# A public image pinned by tag: a name of Docker Hub or a registry host, and a version tag, not latest.
PINNED_PUBLIC_IMAGE = re.compile(r"[a-z0-9./-]+:\d+(\.\d+)+(@sha256:[0-9a-f]{64})?")


def the(manifests: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind and name in (None, m["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def server_repository(container: Manifest) -> str:
    """The path tritonserver gets as --model-repository: TRITON_MODEL_REPOSITORY, or the entrypoint's."""
    match = re.search(r"\$\{TRITON_MODEL_REPOSITORY:-([^}]+)\}", ENTRYPOINT)
    assert match, "docker/entrypoint.sh no longer defaults TRITON_MODEL_REPOSITORY"
    values = {e["name"]: e.get("value") for e in container.get("env", [])}
    return values.get("TRITON_MODEL_REPOSITORY") or match.group(1)


def mount_at(container: Manifest, path: str) -> Manifest:
    mounts: list[Manifest] = [m for m in container.get("volumeMounts", []) if m["mountPath"] == path]
    assert len(mounts) == 1, f"{container['name']}: one volume mounted at {path}"
    return mounts[0]


def environment(container: Manifest, manifests: list[Manifest], secret: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet builds it: envFrom first, then env; `secret` stands for
    the Secret's data (the manifests ship none)."""
    config_maps = {m["metadata"]["name"]: m.get("data", {}) for m in manifests if m["kind"] == "ConfigMap"}
    values: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            values |= config_maps[source["configMapRef"]["name"]]
        else:
            assert source["secretRef"].get("optional") is True, "the Secret is optional (cloud identity)"
            values |= secret
    for item in container.get("env", []):
        if "value" in item:
            values[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["configMapKeyRef"]
            values[item["name"]] = config_maps[ref["name"]][ref["key"]]
    return values


def expand(argument: str, values: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of command and args; an undefined reference stays as it is."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: values.get(m[1], m[0]) if m[1] else "$", argument
    )


def rclone_sync(container: Manifest) -> tuple[str, str]:
    """(source, target) of the container's `rclone sync`, its arguments checked."""
    command = container["command"] + container.get("args", [])
    assert command[:2] == ["rclone", "sync"], command
    options = [arg for arg in command[2:] if arg.startswith("-")]
    source, target = [arg for arg in command[2:] if not arg.startswith("-")]
    assert set(options) <= {"--fast-list", "--verbose"}, options
    return source, target


def fill_containers(overlay: str) -> tuple[list[Manifest], Manifest, Manifest, list[Manifest]]:
    manifests = render(KUBERNETES / "overlays" / overlay)
    pod = the(manifests, "Deployment")["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    return manifests, pod, server, pod.get("initContainers", [])


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_every_overlay_fills_the_volume_the_server_reads_its_repository_from(overlay: str) -> None:
    manifests, pod, server, init = fill_containers(overlay)
    path = server_repository(server)
    mount = mount_at(server, path)
    assert mount.get("readOnly") is True, "the server never writes its repository"
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert len(init) == 1, "one init container fills the model repository, or waits until it is filled"
    (filler,) = init
    filler_mount = next(m for m in filler["volumeMounts"] if m["name"] == mount["name"])
    # the init containers run as the pod's user, hardened as the server
    assert filler["securityContext"] == server["securityContext"]
    assert "memory" in filler["resources"]["limits"]
    if "persistentVolumeClaim" in volume:
        # the shared claim: filled by the Job or kubectl cp; each pod waits until a model is there
        claim = the(manifests, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
        assert volume["persistentVolumeClaim"].get("readOnly") is True
        # the fill writes it while the servers (on several nodes) read it
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
        assert filler["name"] == "wait-for-models"
        assert filler_mount.get("readOnly") is True
        assert filler["image"] == server["image"], "no other image to pull"
        (script,) = [arg for arg in filler["command"] if "config.pbtxt" in arg]
        assert f"'{filler_mount['mountPath']}/*/config.pbtxt'" in script
        assert filler["command"][:2] == ["bash", "-c"]
        assert re.match(r"until compgen -G '[^']+' >/dev/null; do .*; sleep \d+; done$", script), script
    else:
        # each pod copies the repository into its own emptyDir before the server starts
        assert set(volume) == {"name", "emptyDir"}
        assert filler["name"] == "model-sync"
        assert filler_mount.get("readOnly", False) is False
        source, target = rclone_sync(filler)
        assert target == filler_mount["mountPath"]
        values = environment(filler, manifests, secret={})
        assert expand(source, values) == f"models:{values['MODEL_SOURCE']}"
        assert values["RCLONE_CONFIG_MODELS_TYPE"] == "s3"
        assert values["RCLONE_CONFIG_MODELS_ENV_AUTH"] == "true"
        assert PINNED_PUBLIC_IMAGE.fullmatch(filler["image"]), filler["image"]
        # rclone's writable places are volumes: the root filesystem is read-only
        assert mount_at(filler, "/tmp")["name"] == "tmp"
        assert values["RCLONE_CACHE_DIR"].startswith("/tmp/")
    # the server and its filler see the whole volume: what the filler finds or writes at its path, the
    # server reads at its own
    assert "subPath" not in mount and "subPath" not in filler_mount


def test_the_fill_job_writes_the_claim_the_servers_read() -> None:
    manifests = render(KUBERNETES / "model-fill")
    job = the(manifests, "Job")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    _, target = rclone_sync(container)
    mount = mount_at(container, target)
    assert mount.get("readOnly", False) is False
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert pod["restartPolicy"] == "Never"
    # no namespace: `kubectl apply -k deploy/kubernetes/model-fill -n <the overlay's>`
    assert all("namespace" not in m["metadata"] for m in manifests)
    for overlay in OVERLAYS:
        overlay_manifests = render(KUBERNETES / "overlays" / overlay)
        claims = [m for m in overlay_manifests if m["kind"] == "PersistentVolumeClaim"]
        if claims:
            (claim,) = claims
            assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"], overlay
            # the servers run as the Job does: the files it writes are theirs to read
            server_pod = the(overlay_manifests, "Deployment")["spec"]["template"]["spec"]
            assert pod["securityContext"] == server_pod["securityContext"], overlay
    # the same copy as the object-store overlay's init container, from the same ConfigMap
    sync_manifests, _, _, (init,) = fill_containers("gpu-object-store")
    assert {k: container[k] for k in ("image", "command", "env", "envFrom", "securityContext")} == {
        k: init[k] for k in ("image", "command", "env", "envFrom", "securityContext")
    }
    assert the(manifests, "ConfigMap") == {
        **the(sync_manifests, "ConfigMap"),
        "metadata": the(manifests, "ConfigMap")["metadata"],
    }
    assert "namespace" not in the(manifests, "ConfigMap")["metadata"]


# Running the copy: the init container's command, with the rendered environment, on this host.

MODEL_FILES = {
    "demo/config.pbtxt": b'backend: "onnxruntime_zerocopy"\n',
    "demo/1/model.onnx": b"\x08\x07" * 64,
}


def run_the_init_container(values: dict[str, str], target: Path) -> subprocess.CompletedProcess[str]:
    _, _, _, (init,) = fill_containers("gpu-object-store")
    _, mount_path = rclone_sync(init)
    # the container's paths, here under tmp_path
    cache = values["RCLONE_CACHE_DIR"]
    values = values | {"RCLONE_CACHE_DIR": str(target.parent / "cache" / cache.lstrip("/"))}
    command = [expand(arg, values) for arg in init["command"]]
    command = [str(target) if arg == mount_path else arg for arg in command]
    return subprocess.run(
        command,
        env={"PATH": os.environ["PATH"], "HOME": str(target.parent), **values},
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_a_repository(target: Path) -> None:
    assert {str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()} == set(MODEL_FILES)
    for name, content in MODEL_FILES.items():
        assert (target / name).read_bytes() == content


needs_rclone = pytest.mark.skipif(
    shutil.which("rclone") is None, reason="rclone is not installed (Debian: apt-get install rclone)"
)


@needs_rclone
def test_the_sync_copies_a_folder_into_the_servers_layout_and_drops_stale_files(tmp_path: Path) -> None:
    source, target = tmp_path / "bucket" / "triton-models", tmp_path / "models"
    for name, content in MODEL_FILES.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(content)
    target.mkdir()
    (target / "old_model").mkdir()
    (target / "old_model" / "config.pbtxt").write_text("")
    manifests, _, _, (init,) = fill_containers("gpu-object-store")
    values = environment(init, manifests, secret={})
    # the same remote `models`, of the local type: MODEL_SOURCE is a path
    values |= {"RCLONE_CONFIG_MODELS_TYPE": "local", "MODEL_SOURCE": str(source)}
    result = run_the_init_container(values, target)
    assert result.returncode == 0, result.stderr
    assert_a_repository(target)


@needs_rclone
def test_the_sync_copies_from_an_s3_compatible_endpoint_with_the_secrets_keys(tmp_path: Path) -> None:
    moto_server = pytest.importorskip("moto.server", reason="moto (PyPI: moto[server]) is not installed")
    boto3 = pytest.importorskip("boto3")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        keys = {"AWS_ACCESS_KEY_ID": "triton", "AWS_SECRET_ACCESS_KEY": "triton-secret"}
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=keys["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=keys["AWS_SECRET_ACCESS_KEY"],
        )
        s3.create_bucket(Bucket="my-bucket")
        for name, content in MODEL_FILES.items():
            s3.put_object(Bucket="my-bucket", Key=f"triton-models/{name}", Body=content)
        manifests, _, _, (init,) = fill_containers("gpu-object-store")
        config_map = the(manifests, "ConfigMap")
        # what docs/kubernetes.md says to set for an S3-compatible server (MinIO and others)
        config_map["data"] |= {
            "RCLONE_CONFIG_MODELS_PROVIDER": "Other",
            "RCLONE_CONFIG_MODELS_ENDPOINT": endpoint,
        }
        values = environment(init, manifests, secret=keys)
        target = tmp_path / "models"
        target.mkdir()
        result = run_the_init_container(values, target)
        assert result.returncode == 0, result.stderr
        assert_a_repository(target)
        # and without the Secret's keys the copy fails: the init container does not let the server start
        # on an empty repository
        values = environment(init, manifests, secret={})
        empty = tmp_path / "empty"
        empty.mkdir()
        failed = run_the_init_container(values | {"AWS_EC2_METADATA_DISABLED": "true"}, empty)
        assert failed.returncode != 0
        assert "credential" in failed.stderr.lower()
        assert list(empty.iterdir()) == []
    finally:
        server.stop()


def test_the_guide_says_what_a_repository_holds_for_each_backend_and_how_to_fill_it() -> None:
    section = GUIDE.split("## Getting the models in", 1)[1].split("\n## ", 1)[0]
    # the backend of the image serves config.pbtxt + 1/model.onnx; model.py only for backend "python"
    assert re.search(r'onnxruntime_zerocopy"`[^.]*`config\.pbtxt`[^.]*`1/model\.onnx`', section)
    for sentence in re.split(r"(?<=\.)\s", section):
        if "model.py" in sentence:
            assert 'backend: "python"' in sentence, sentence
    # every kubectl -k path of the guide exists, and every fill piece is described
    for path in re.findall(r"kubectl apply -k ([\w/.-]+[\w])", GUIDE):
        assert (ROOT / path / "kustomization.yaml").is_file(), path
    for piece in ("overlays/gpu-object-store", "model-fill", "kubectl cp", "components/model-sync"):
        assert piece in section, piece
