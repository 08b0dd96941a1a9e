"""docs/kubernetes.md's client-side gRPC balancing recipe, run against a real tritonserver: the snippet as
written, with the headless Service's DNS name swapped for this host's server."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from render_manifests import render

from tests.support.paths import ROOT, SERVER_TOLERANCE, demo_onnx
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.repository import pin_one_instance
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import infer

pytestmark = pytest.mark.integration

GUIDE = ROOT / "docs" / "kubernetes.md"


def balancing_snippet() -> str:
    section = GUIDE.read_text().split("## gRPC load balancing", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert match, "docs/kubernetes.md: no python snippet under 'gRPC load balancing'"
    return match.group(1)


def test_the_snippet_targets_the_headless_grpc_service_of_the_gpu_overlay() -> None:
    manifests = render(ROOT / "deploy" / "kubernetes" / "overlays" / "gpu")
    (headless,) = [m for m in manifests if m["kind"] == "Service" and m["spec"].get("clusterIP") == "None"]
    (port,) = headless["spec"]["ports"]
    name, namespace = headless["metadata"]["name"], headless["metadata"]["namespace"]
    assert f'"dns:///{name}.{namespace}.svc.cluster.local:{port["port"]}"' in balancing_snippet()


def test_the_round_robin_client_of_the_snippet_gets_right_answers(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    shutil.copytree(ROOT / "model_repository" / "demo", repository / "demo")
    shutil.copy(demo_onnx(), repository / "demo" / "1" / "model.onnx")
    pin_one_instance(repository / "demo")
    x = np.random.default_rng(0).standard_normal((3, 2010)).astype(np.float32)
    want = reference_outputs(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    with LocalTritonServer(repository) as server:
        # localhost: the resolver returns this host's addresses, as DNS returns the pods' for the Service
        snippet = re.sub(r"dns:///[^\"]+", f"dns:///localhost:{server.grpc_port}", balancing_snippet())
        namespace: dict[str, Any] = {}
        exec(compile(snippet, str(GUIDE), "exec"), namespace)
        client = namespace["client"]
        answers = [infer(client, "demo", {"np_script_embeddings": x}, ["np_logits"])[0] for _ in range(3)]
    for answer in answers:
        np.testing.assert_allclose(answer["np_logits"], want, **SERVER_TOLERANCE)
