"""Offline checks of the Kubernetes manifests (deploy/kubernetes): every overlay and the model-fill Job
render, validate against the Kubernetes API schemas of each supported release and prometheus-operator's
ServiceMonitor schema, and keep the properties the server image needs (probes, grace period, /dev/shm,
non-root, GPU limits, the CPU overlay's size, wiring between the objects, the autoscaler's metric); the
model repository is filled where the server reads it; custom resources only in the monitoring overlay;
a NetworkPolicy in front of the unauthenticated endpoints."""

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
# The overlays that need prometheus-operator's CRDs and prometheus-adapter; every other one needs neither.
MONITORING_OVERLAYS = {"gpu-monitoring"}
# Every kustomization a user applies: the overlays, and the Job that fills the shared claim.
KUSTOMIZATIONS = [f"overlays/{name}" for name in OVERLAYS] + ["model-fill"]
KUSTOMIZATION_IDS = [path.replace("/", "-") for path in KUSTOMIZATIONS]
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


# compose's override tags (`deploy: !reset {}`) read as their plain values
COMPOSE_CPU = yaml.safe_load(re.sub(r"!\w+\s", "", (ROOT / "docker" / "compose.cpu.yaml").read_text()))[
    "services"
]["triton"]
ADAPTER = yaml.safe_load((KUBERNETES / "prometheus-adapter" / "values.yaml").read_text())


def rendered(overlay: str) -> list[Manifest]:
    manifests: list[Manifest] = render(KUBERNETES / "overlays" / overlay)
    return manifests


def pod_spec(manifests: list[Manifest], kind: str = "Deployment") -> Manifest:
    spec: Manifest = the(manifests, kind)["spec"]["template"]["spec"]
    return spec


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


def kubernetes_own(api_version: str) -> bool:
    """Kubernetes' own API groups (the core group, apps, batch..., *.k8s.io), not a CRD's."""
    group = api_version.rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def entrypoint_default(variable: str) -> int:
    match = re.search(rf"\$\{{{variable}:-(\d+)\}}", ENTRYPOINT)
    assert match, f"docker/entrypoint.sh no longer defaults {variable}"
    return int(match.group(1))


def env(container: Manifest) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", [])}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=KUSTOMIZATION_IDS)
def test_every_object_validates_against_the_schema_of_each_supported_kubernetes(
    kustomization: str, version: str
) -> None:
    manifests = render(KUBERNETES / kustomization)
    if kustomization.startswith("overlays/"):
        assert {m["kind"] for m in manifests} >= {
            "Deployment",
            "Service",
            "PodDisruptionBudget",
            "NetworkPolicy",
        }
    for manifest in manifests:
        validate(manifest, version)


def test_the_schemas_span_the_oldest_supported_release_to_the_newest_bundled() -> None:
    assert KUBERNETES_VERSIONS[0] == f"{OLDEST_SUPPORTED}.0"
    assert KUBERNETES_VERSIONS[-1] == max(all_versions(), key=Version)
    assert len(KUBERNETES_VERSIONS) >= 2


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_only_the_monitoring_overlay_needs_the_prometheus_operator_and_adapter(overlay: str) -> None:
    manifests = rendered(overlay)
    custom = {m["kind"] for m in manifests if not kubernetes_own(m["apiVersion"])}
    custom_metrics = [
        metric
        for m in manifests
        if m["kind"] == "HorizontalPodAutoscaler"
        for metric in m["spec"].get("metrics", [])
        if metric["type"] in ("Pods", "Object", "External")
    ]
    if overlay in MONITORING_OVERLAYS:
        assert custom == {"ServiceMonitor"}
        assert custom_metrics, "the monitoring overlay's autoscaler scales on the adapter's metric"
        # the autoscaler owns the replica count
        assert "replicas" not in the(manifests, "Deployment")["spec"]
    else:
        # `kubectl apply -k` works on a cluster without prometheus-operator's CRDs or the adapter
        assert custom == set()
        assert custom_metrics == []
    assert set(OVERLAYS) >= MONITORING_OVERLAYS


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
    broken = copy.deepcopy(the(rendered("gpu-monitoring"), kind))
    mutate(broken)
    with pytest.raises(
        (kubernetes_validate.ValidationError, pydantic.ValidationError, AssertionError)
    ) as error:
        validate(broken, KUBERNETES_VERSIONS[0])
    assert expected in str(error.value)


def kustomize(directory: Path) -> list[Manifest]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip(
            "kubectl (with its built-in kustomize) is not installed: the renderer is not cross-checked"
        )
    built = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=True
    ).stdout
    return list(yaml.safe_load_all(built))


def keyed(manifests: list[Manifest]) -> dict[tuple[str, str], Manifest]:
    return {(m["kind"], m["metadata"]["name"]): m for m in manifests}


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS, ids=KUSTOMIZATION_IDS)
def test_the_renderer_agrees_with_kustomize(kustomization: str) -> None:
    assert keyed(render(KUBERNETES / kustomization)) == keyed(kustomize(KUBERNETES / kustomization))


def write_kustomization(folder: Path, text: str, resources: dict[str, str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kustomization.yaml").write_text(text)
    for name, content in (resources or {}).items():
        (folder / name).write_text(content)
    return folder


POD = """apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
    - {name: a, image: registry.example.com:5000/team/server:1.0}
    - {name: b, image: busybox:1.36.1}
"""


def test_components_add_objects_and_patch_what_was_gathered_before_the_overlays_own_patches(
    tmp_path: Path,
) -> None:
    write_kustomization(tmp_path / "base", "resources: [pod.yaml]\n", {"pod.yaml": POD})
    write_kustomization(
        tmp_path / "component",
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [cm.yaml]\n"
        "patches:\n  - target: {kind: Pod, name: p}\n"
        '    patch: \'[{"op": "add", "path": "/metadata/labels", "value": {"from": "component"}}]\'\n',
        {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"},
    )
    overlay = write_kustomization(
        tmp_path / "overlay",
        "namespace: ns\nresources: [../base]\ncomponents: [../component]\n"
        "patches:\n  - target: {kind: Pod, name: p}\n"
        '    patch: \'[{"op": "replace", "path": "/metadata/labels/from", "value": "overlay"}]\'\n'
        "images:\n  - {name: registry.example.com:5000/team/server, newTag: '2.0'}\n"
        "  - {name: busybox, digest: 'sha256:" + "0" * 64 + "'}\n",
    )
    manifests = render(overlay)
    pod = the(manifests, "Pod")
    assert pod["metadata"] == {"name": "p", "labels": {"from": "overlay"}, "namespace": "ns"}
    assert [c["image"] for c in pod["spec"]["containers"]] == [
        "registry.example.com:5000/team/server:2.0",
        "busybox@sha256:" + "0" * 64,
    ]
    assert the(manifests, "ConfigMap")["metadata"]["namespace"] == "ns"
    if shutil.which("kubectl"):
        assert keyed(manifests) == keyed(kustomize(overlay))


@pytest.mark.parametrize(
    ("component", "listed_as", "message"),
    [
        # a component may not set the namespace (the overlay does)
        (
            "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nnamespace: x\n",
            "components",
            r"unsupported field\(s\) \['namespace'\]",
        ),
        # a Kustomization listed as a component, and a component listed as a resource
        ("resources: []\n", "components", "is a Kustomization"),
        ("apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\n", "resources", "is a Component"),
        # a patch that matches nothing (a renamed object)
        (
            "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n"
            "  - target: {kind: Deployment, name: gone}\n    patch: '[]'\n",
            "components",
            "matches no object",
        ),
    ],
)
def test_the_renderer_refuses_component_fields_it_does_not_implement_and_idle_patches(
    tmp_path: Path, component: str, listed_as: str, message: str
) -> None:
    write_kustomization(tmp_path / "piece", component)
    write_kustomization(tmp_path / "base", "resources: [pod.yaml]\n", {"pod.yaml": POD})
    overlay = write_kustomization(tmp_path / "overlay", f"resources: [../base]\n{listed_as}: [../piece]\n")
    with pytest.raises(RenderError, match=message):
        render(overlay)


def test_the_renderer_refuses_kustomize_fields_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\ncommonLabels: {team: ml}\n")
    with pytest.raises(RenderError, match=r"unsupported field\(s\) \['commonLabels'\]"):
        render(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("images: [{name: a, newTagg: b}]\n")
    with pytest.raises(RenderError, match="an image names"):
        render(tmp_path)


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_probes_ask_triton_for_readiness_and_liveness_by_inferring(overlay: str) -> None:
    container = server_container(rendered(overlay))
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    # the entrypoint's defaults (TRITON_HTTP_PORT etc.), which the manifests do not override
    assert ports == {
        name: entrypoint_default(f"TRITON_{name.upper()}_PORT") for name in ("http", "grpc", "metrics")
    }
    probes = {kind: container[f"{kind}Probe"]["httpGet"] for kind in ("startup", "readiness")}
    assert {kind: (probe["path"], probe["port"]) for kind, probe in probes.items()} == {
        "startup": ("/v2/health/ready", "http"),
        "readiness": ("/v2/health/ready", "http"),
    }
    # Liveness infers: a server whose stub died stays live and ready. The probe's URL is the entrypoint's
    # (TRITON_HTTP_PORT), its timeout within the kubelet's, and the entrypoint's watchdog is off beside it.
    liveness = container["livenessProbe"]
    assert liveness["exec"]["command"][:3] == ["python3", "-m", "triton_ort.probe"]
    assert "--require-ready" not in liveness["exec"]["command"]
    timeout = float(liveness["exec"]["command"][liveness["exec"]["command"].index("--timeout") + 1])
    assert timeout < liveness["timeoutSeconds"]
    assert env(container).get("TRITON_ORT_WATCHDOG") == "0"
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
    for overlay in OVERLAYS:
        limits = server_container(rendered(overlay))["resources"]["limits"]
        if overlay == "cpu":
            assert "nvidia.com/gpu" not in limits
        else:
            assert limits["nvidia.com/gpu"] == 1, overlay


def test_the_cpu_overlay_fits_a_small_cpu_node_and_gets_no_gpu() -> None:
    manifests = rendered("cpu")
    container = server_container(manifests)
    resources = container["resources"]
    requests, limits = resources["requests"], resources["limits"]
    # A node of 2 CPUs and 4 GiB (kind or minikube on a laptop, a small cloud VM) schedules it: its
    # allocatable memory is about 3.3 GiB after the system's reservations.
    assert quantity_cpus(requests["cpu"]) <= 1
    assert quantity_bytes(requests["memory"]) <= 2 * 2**30
    assert quantity_bytes(limits["memory"]) <= 4 * 2**30
    # no CPU limit (throttling), no GPU of any vendor
    assert set(limits) == {"memory"}
    # room for the 1 GiB /dev/shm, which counts against the memory limit, and the request
    shm = next(v for v in pod_spec(manifests)["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory")
    assert quantity_bytes(limits["memory"]) >= quantity_bytes(requests["memory"]) + quantity_bytes(
        shm["emptyDir"]["sizeLimit"]
    )
    # Where the NVIDIA runtime is the default, the image's NVIDIA_VISIBLE_DEVICES=all would still hand
    # it the node's GPUs: the entrypoint would find /dev/nvidia* and the instances would not be CPU ones.
    assert env(container)["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert the(manifests, "Deployment")["spec"]["replicas"] == 1
    # the same server image as the GPU overlay: it serves on the CPU too (docs/kubernetes.md)
    assert container["image"] == server_container(rendered("gpu"))["image"]


def quantity_cpus(quantity: str) -> float:
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_the_server_environment_matches_compose(overlay: str) -> None:
    expected = {key: str(value) for key, value in COMPOSE["environment"].items()}
    if overlay == "cpu":
        expected |= COMPOSE_CPU["environment"]
    # The one difference on purpose: the liveness probe restarts a server that stopped answering, so the
    # entrypoint's watchdog (compose's way, on by default) is off here.
    expected["TRITON_ORT_WATCHDOG"] = "0"
    assert env(server_container(rendered(overlay))) == expected


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_services_budget_and_policy_point_at_the_server(overlay: str) -> None:
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
    assert selects(the(manifests, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"], pod_labels)
    assert selects(the(manifests, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"], pod_labels)
    assert {m["metadata"].get("namespace") for m in manifests} == {
        yaml.safe_load((KUBERNETES / "overlays" / overlay / "kustomization.yaml").read_text())["namespace"]
    }


@pytest.mark.parametrize("overlay", sorted(MONITORING_OVERLAYS))
def test_the_monitor_and_the_autoscaler_point_at_the_server(overlay: str) -> None:
    manifests = rendered(overlay)
    deployment = the(manifests, "Deployment")
    services = [m for m in manifests if m["kind"] == "Service"]
    # The monitor scrapes through exactly one Service, on its metrics port.
    monitor = the(manifests, "ServiceMonitor")
    scraped = [
        s for s in services if selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
    ]
    assert len(scraped) == 1
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert "metrics" in {port["name"] for port in scraped[0]["spec"]["ports"]}
    target = the(manifests, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_a_network_policy_admits_only_listed_clients_to_the_unauthenticated_ports(overlay: str) -> None:
    manifests = rendered(overlay)
    (policy,) = [m for m in manifests if m["kind"] == "NetworkPolicy"]
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    container_ports = {port["name"] for port in server_container(manifests)["ports"]}
    admitted: dict[str, set[str]] = {}
    for rule in spec["ingress"]:
        # a rule without `from` (or with an empty one) admits everyone, one without ports every port
        assert rule.get("from"), rule
        assert rule.get("ports"), rule
        for peer in rule["from"]:
            assert set(peer) <= {"podSelector", "namespaceSelector"}, peer
            assert peer != {"namespaceSelector": {}}, "every namespace"
            key = yaml.safe_dump(peer, sort_keys=True)
            admitted.setdefault(key, set()).update(port["port"] for port in rule["ports"])
    assert set().union(*admitted.values()) <= container_ports
    # the server's own namespace reaches every port; clients' namespaces only inference; Prometheus's
    # namespace only the metrics
    assert admitted == {
        yaml.safe_dump({"podSelector": {}}): {"http", "grpc", "metrics"},
        yaml.safe_dump({"namespaceSelector": {"matchLabels": {"triton-ort/client": "true"}}}): {
            "http",
            "grpc",
        },
        yaml.safe_dump(
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ): {"metrics"},
    }


def test_the_autoscaler_scales_on_the_adapters_queue_time_per_request() -> None:
    hpa = the(rendered("gpu-monitoring"), "HorizontalPodAutoscaler")
    (metric,) = hpa["spec"]["metrics"]
    (rule,) = ADAPTER["rules"]["custom"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == rule["name"]["as"]
    # Triton's cumulative queue time over its count of successful requests (Triton's metric names).
    assert re.search(r"rate\(nv_inference_queue_duration_us\{<<\.LabelMatchers>>\}", rule["metricsQuery"])
    assert re.search(r"rate\(nv_inference_request_success\{<<\.LabelMatchers>>\}", rule["metricsQuery"])
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    assert hpa["spec"]["minReplicas"] >= 2, "one pod alone cannot be drained under the disruption budget"


def test_the_guide_lists_every_piece_of_deploy_kubernetes() -> None:
    guide = (ROOT / "docs" / "kubernetes.md").read_text()
    table = guide.split("| file | what it is |", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE))
    pieces = {f"base/{path.name}" for path in (KUBERNETES / "base").glob("*.yaml")} - {
        "base/kustomization.yaml"
    }
    pieces |= {
        f"{path.parent.relative_to(KUBERNETES)}/"
        for path in KUBERNETES.glob("*/*/kustomization.yaml")
        if path.parent.parent.name != "base"
    } | {
        f"{path.parent.name}/"
        for path in KUBERNETES.glob("*/kustomization.yaml")
        if path.parent.name != "base"
    }
    pieces |= {"prometheus-adapter/values.yaml"}
    assert listed == pieces


def test_the_readme_kubernetes_line_builds_the_image_and_creates_the_overlays_namespace() -> None:
    """A newcomer following the README's one line must not meet a missing namespace or image."""
    (line,) = [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("| Kubernetes |")]
    kustomization = yaml.safe_load((KUBERNETES / "overlays" / "gpu" / "kustomization.yaml").read_text())
    assert f"kubectl create namespace {kustomization['namespace']}" in line
    assert "docker build -f docker/Dockerfile" in line and "newName" in line
    assert line.index("create namespace") < line.index("kubectl apply -k deploy/kubernetes/overlays/gpu")
