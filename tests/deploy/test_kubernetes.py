"""Offline checks of the Kubernetes manifests (deploy/kubernetes): every overlay renders, validates against
the Kubernetes API schemas of each supported release and prometheus-operator's ServiceMonitor schema, and
keeps the properties the server image needs (probes, grace period, /dev/shm, non-root, GPU limits, wiring
between the objects, the autoscaler's metric)."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pydantic
import pytest
import yaml
from cloudcoil.models.prometheus_operator.v1 import ServiceMonitor
from kubernetes_validate.utils import all_versions
from packaging.version import Version
from render_manifests import RenderError, render

from tests.support.paths import ROOT

Manifest = dict[str, Any]

KUBERNETES = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(path.name for path in (KUBERNETES / "overlays").iterdir())
# "gpu" alone as a test id would be read as the gpu marker (tests/conftest.py) and skipped without CUDA.
OVERLAY_IDS = [f"overlay-{name}" for name in OVERLAYS]
# The oldest Kubernetes release the manifests support (docs/kubernetes.md); every newer one that
# kubernetes-validate bundles is checked too.
OLDEST_SUPPORTED = Version("1.28")
KUBERNETES_VERSIONS = sorted({v for v in all_versions() if Version(v) >= OLDEST_SUPPORTED}, key=Version)
# Kinds that are not Kubernetes' own, validated against their operator's schema instead.
CUSTOM_RESOURCE_SCHEMAS: dict[str, type[pydantic.BaseModel]] = {"ServiceMonitor": ServiceMonitor}
# What the server image sets up (docker/).
ENTRYPOINT = (ROOT / "docker" / "entrypoint.sh").read_text()
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()
COMPOSE = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())["services"]["triton"]
ADAPTER = yaml.safe_load((KUBERNETES / "prometheus-adapter" / "values.yaml").read_text())


def rendered(overlay: str) -> list[Manifest]:
    manifests: list[Manifest] = render(KUBERNETES / "overlays" / overlay)
    return manifests


def the(manifests: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind and name in (None, m["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def server_container(manifests: list[Manifest]) -> Manifest:
    containers = the(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: Manifest = containers[0]
    return container


def validate(manifest: Manifest, version: str) -> None:
    """Raises when `manifest` breaks its schema; unknown fields are errors (strict) for every kind."""
    schema = CUSTOM_RESOURCE_SCHEMAS.get(manifest["kind"])
    if schema is None:
        kubernetes_validate.validate(manifest, version, strict=True)
        return
    # The generated models ignore unknown fields: a field that does not survive the round trip is one.
    parsed = schema.model_validate(manifest).model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert parsed == manifest, f"{manifest['kind']} has fields its schema does not know"


def entrypoint_default(variable: str) -> int:
    match = re.search(rf"\$\{{{variable}:-(\d+)\}}", ENTRYPOINT)
    assert match, f"docker/entrypoint.sh no longer defaults {variable}"
    return int(match.group(1))


def env(container: Manifest) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", [])}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_every_object_validates_against_the_schema_of_each_supported_kubernetes(
    overlay: str, version: str
) -> None:
    manifests = rendered(overlay)
    assert {m["kind"] for m in manifests} >= {
        "Deployment",
        "Service",
        "PersistentVolumeClaim",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "ServiceMonitor",
    }
    for manifest in manifests:
        validate(manifest, version)


@pytest.mark.parametrize(
    ("kind", "mutate", "expected"),
    [
        (
            "Deployment",
            lambda m: m["spec"]["template"]["spec"].update(terminationGracePeriod=45),
            "terminationGr",
        ),
        ("Deployment", lambda m: m["spec"].update(replicas="two"), "two"),
        ("ServiceMonitor", lambda m: m["spec"]["endpoints"][0].update(interval="15x"), "interval"),
        ("ServiceMonitor", lambda m: m["spec"]["endpoints"][0].update(scrapeTimout="10s"), "fields"),
    ],
)
def test_the_validation_rejects_a_broken_object(kind: str, mutate: Any, expected: str) -> None:
    broken = copy.deepcopy(the(rendered("gpu"), kind))
    mutate(broken)
    with pytest.raises(
        (kubernetes_validate.ValidationError, pydantic.ValidationError, AssertionError)
    ) as error:
        validate(broken, KUBERNETES_VERSIONS[0])
    assert expected in str(error.value)


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_the_renderer_agrees_with_kustomize(overlay: str) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip(
            "kubectl (with its built-in kustomize) is not installed: the renderer is not cross-checked"
        )
    built = subprocess.run(
        [kubectl, "kustomize", str(KUBERNETES / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    def keyed(manifests: list[Manifest]) -> dict[tuple[str, str], Manifest]:
        return {(m["kind"], m["metadata"]["name"]): m for m in manifests}

    assert keyed(rendered(overlay)) == keyed(list(yaml.safe_load_all(built)))


def test_the_renderer_refuses_kustomize_fields_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\ncommonLabels: {team: ml}\n")
    with pytest.raises(RenderError, match=r"unsupported field\(s\) \['commonLabels'\]"):
        render(tmp_path)


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_probes_ask_triton_for_readiness_and_liveness_on_its_http_port(overlay: str) -> None:
    container = server_container(rendered(overlay))
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    # the entrypoint's defaults (TRITON_HTTP_PORT etc.), which the manifests do not override
    assert ports == {
        name: entrypoint_default(f"TRITON_{name.upper()}_PORT") for name in ("http", "grpc", "metrics")
    }
    probes = {kind: container[f"{kind}Probe"]["httpGet"] for kind in ("startup", "readiness", "liveness")}
    assert {kind: (probe["path"], probe["port"]) for kind, probe in probes.items()} == {
        "startup": ("/v2/health/ready", "http"),
        "readiness": ("/v2/health/ready", "http"),
        "liveness": ("/v2/health/live", "http"),
    }
    # The startup probe covers at least the stub's own start-up timeout: the first load is not a failure.
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= entrypoint_default(
        "TRITON_PYTHON_STUB_TIMEOUT_S"
    )


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_the_grace_period_outlasts_tritons_exit_timeout(overlay: str) -> None:
    manifests = rendered(overlay)
    exit_timeout = int(
        env(server_container(manifests)).get("TRITON_EXIT_TIMEOUT_S", 0)
    ) or entrypoint_default("TRITON_EXIT_TIMEOUT_S")
    grace = the(manifests, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    # the margin lets the stubs unload and the process exit after the drain, as compose's stop_grace_period
    assert grace >= exit_timeout + 10
    assert grace >= int(COMPOSE["stop_grace_period"].removesuffix("s"))


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_dev_shm_is_memory_sized_like_compose(overlay: str) -> None:
    manifests = rendered(overlay)
    pod = the(manifests, "Deployment")["spec"]["template"]["spec"]
    mounts = {mount["mountPath"]: mount["name"] for mount in server_container(manifests)["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    shm = volumes[mounts["/dev/shm"]]["emptyDir"]
    assert shm["medium"] == "Memory"
    assert quantity_bytes(shm["sizeLimit"]) >= quantity_bytes(COMPOSE["shm_size"])


def quantity_bytes(quantity: str) -> int:
    """A Kubernetes quantity (1Gi) or a Docker size (1gb: binary units, as Docker reads them) in bytes."""
    match = re.fullmatch(r"(\d+)\s*([KMGT]?)(i|b|ib)?", quantity, flags=re.IGNORECASE)
    assert match, f"unexpected size {quantity!r}"
    number, unit, suffix = match.groups()
    base = 1000 if suffix is None and unit else 1024
    return int(number) * int(base ** " KMGT".index(unit.upper() or " "))


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_the_server_runs_non_root_on_a_read_only_root_with_emptydirs_where_it_writes(overlay: str) -> None:
    manifests = rendered(overlay)
    pod = the(manifests, "Deployment")["spec"]["template"]["spec"]
    container = server_container(manifests)
    image_user = re.search(r"^USER (\d+):(\d+)$", DOCKERFILE, flags=re.MULTILINE)
    assert image_user, "docker/Dockerfile no longer runs as a numeric USER uid:gid"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == tuple(
        map(int, image_user.groups())
    )
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    home = re.search(r"^ENV HOME=(\S+)$", DOCKERFILE, flags=re.MULTILINE)
    assert home, "docker/Dockerfile no longer sets HOME"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    writable = {
        mount["mountPath"]: volumes[mount["name"]]
        for mount in container["volumeMounts"]
        if not mount.get("readOnly", False)
    }
    assert set(writable) == {"/dev/shm", "/tmp", home.group(1)}
    assert all("emptyDir" in volume for volume in writable.values())


def test_each_gpu_pod_asks_for_one_gpu_and_the_cpu_overlay_for_none() -> None:
    assert server_container(rendered("gpu"))["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in server_container(rendered("cpu"))["resources"]["limits"]


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_the_server_environment_matches_compose(overlay: str) -> None:
    assert env(server_container(rendered(overlay))) == {
        key: str(value) for key, value in COMPOSE["environment"].items()
    }


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_services_monitor_budget_autoscaler_and_claim_point_at_the_server(overlay: str) -> None:
    manifests = rendered(overlay)
    deployment = the(manifests, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(deployment["spec"]["selector"]["matchLabels"], pod_labels)
    container_ports = {port["name"] for port in server_container(manifests)["ports"]}
    services = [m for m in manifests if m["kind"] == "Service"]
    for service in services:
        assert selects(service["spec"]["selector"], pod_labels), service["metadata"]["name"]
        assert {port["targetPort"] for port in service["spec"]["ports"]} <= container_ports
    # gRPC's client-side balancing needs every pod's address from DNS: a headless Service.
    assert any(
        s["spec"].get("clusterIP") == "None" and [p["name"] for p in s["spec"]["ports"]] == ["grpc"]
        for s in services
    )
    # The monitor scrapes through exactly one Service, on its metrics port.
    monitor = the(manifests, "ServiceMonitor")
    scraped = [
        s for s in services if selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
    ]
    assert len(scraped) == 1
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert "metrics" in {port["name"] for port in scraped[0]["spec"]["ports"]}
    assert selects(the(manifests, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"], pod_labels)
    target = the(manifests, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in deployment["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims == {the(manifests, "PersistentVolumeClaim")["metadata"]["name"]}
    assert {m["metadata"].get("namespace") for m in manifests} == {
        yaml.safe_load((KUBERNETES / "overlays" / overlay / "kustomization.yaml").read_text())["namespace"]
    }


def test_the_autoscaler_scales_on_the_adapters_queue_time_per_request() -> None:
    hpa = the(rendered("gpu"), "HorizontalPodAutoscaler")
    (metric,) = hpa["spec"]["metrics"]
    (rule,) = ADAPTER["rules"]["custom"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == rule["name"]["as"]
    # Triton's cumulative queue time over its count of successful requests (Triton's metric names).
    assert re.search(r"rate\(nv_inference_queue_duration_us\{<<\.LabelMatchers>>\}", rule["metricsQuery"])
    assert re.search(r"rate\(nv_inference_request_success\{<<\.LabelMatchers>>\}", rule["metricsQuery"])
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    assert hpa["spec"]["minReplicas"] >= 2, "one pod alone cannot be drained under the disruption budget"
