"""The test harness (triton_ort.harness) without a server: specs -> config.pbtxt, the malformed catalogue,
process readings, the reference comparison."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.support.repository import MULTI_IO, RAGGED_ADD
from triton_ort.harness.malformed import malformed_requests
from triton_ort.harness.processes import alive, descendants, rss_bytes, zombies
from triton_ort.harness.reference import compare
from triton_ort.harness.repository import read_config, write_config
from triton_ort.harness.server import free_ports
from triton_ort.harness.transport import TensorMeta, infer_inputs
from triton_ort.harness.waiting import wait_for


def test_spec_renders_a_config_triton_parses_back(tmp_path: Path) -> None:
    write_config(tmp_path / "ragged_add", RAGGED_ADD.config())
    text = (tmp_path / "ragged_add" / "config.pbtxt").read_text()
    parsed = text_format.Parse(text, model_config_pb2.ModelConfig())
    assert parsed == read_config(tmp_path / "ragged_add")
    assert [i.name for i in parsed.input] == ["x", "y"] and all(i.allow_ragged_batch for i in parsed.input)
    assert parsed.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert parsed.dynamic_batching.max_queue_delay_microseconds == 200_000
    assert parsed.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value == "no"


def test_catalogue_breaks_each_request_the_way_its_kind_says() -> None:
    metas = [TensorMeta(t.name, t.data_type, (-1, *t.dims)) for t in MULTI_IO.inputs]
    catalogue = {m.kind: m for m in malformed_requests("multi_io", metas, max_batch_size=64)}
    assert set(catalogue) == {
        "wrong_dtype",
        "bytes_for_numeric",
        "wrong_inner_dim",
        "wrong_rank",
        "unknown_input",
        "missing_input",
        "duplicate_input",
        "batch_above_max",
        "inputs_disagree_on_batch_size",
    }
    assert catalogue["wrong_dtype"].inputs[0].wire_type == "FP64"
    assert catalogue["wrong_inner_dim"].inputs[0].array.shape == (2, 4)  # a: [batch, 3]
    assert [t.name for t in catalogue["missing_input"].inputs] == ["b", "c"]
    assert catalogue["batch_above_max"].inputs[0].array.shape[0] == 65
    assert catalogue["inputs_disagree_on_batch_size"].says.search(
        "input 'b' batch size does not match other inputs for 'multi_io'"
    )
    assert all(m.code == "INVALID_ARG" for m in catalogue.values())
    items = infer_inputs(httpclient, catalogue["bytes_for_numeric"].inputs)
    assert [item.datatype() for item in items] == ["BYTES", "INT64", "BOOL"]


def test_process_readings_follow_a_real_process_tree() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '120'])"], start_new_session=True
    )
    try:
        # bounded: the child interpreter may take seconds to start on a loaded machine
        [grandchild] = wait_for(lambda: descendants(parent.pid), 60, "the grandchild")
        assert psutil.Process(grandchild).name() == "sleep"
        assert alive(grandchild) and rss_bytes(parent.pid) > 0
        assert zombies(parent.pid) == []
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
    assert descendants(parent.pid) == [] and rss_bytes(parent.pid) == 0


def test_an_exited_child_nobody_waited_for_is_a_zombie() -> None:
    # SIGCHLD left at its default (a sandbox may ignore it, and then the kernel reaps children itself).
    previous = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        child = subprocess.Popen(["true"])
        wait_for(lambda: not alive(child.pid), 60, "the child's exit")
        assert child.pid in zombies(os.getpid())
        child.wait()
        assert child.pid not in zombies(os.getpid())
    finally:
        signal.signal(signal.SIGCHLD, previous)


def test_free_ports_are_all_different_and_avoid_what_they_are_told() -> None:
    """Ports chosen one after another with each probe closed can repeat (HTTP and gRPC once got one port);
    500 chosen that way repeated in each of 100 tries here. free_ports keeps every probe bound to the end."""
    ports = free_ports(500)
    assert len(set(ports)) == 500
    avoided = set(ports[:50])
    assert avoided.isdisjoint(free_ports(100, avoid=avoided))


def test_compare_says_what_differs_and_lets_nan_match_nan() -> None:
    want = {"y": np.array([1.0, np.nan], np.float32), "i": np.array([1, 2])}
    assert compare({"y": want["y"].copy(), "i": want["i"].copy()}, want, rtol=0, atol=0) == []
    problems = compare({"y": np.array([1.5, np.nan], np.float32)}, want, rtol=0, atol=0.1)
    assert problems == ["output 'y': max abs difference 0.5 beyond rtol 0, atol 0.1", "output 'i' missing"]


# The clients that the client image ships (docker/client.Dockerfile: client/ and the harness, no torch).
_REQUEST_CLIENTS = ("client.smoke", "client.load", "client.soak", "triton_ort.cli", "triton_ort.cli.infer")


def test_the_harness_and_the_clients_import_no_torch() -> None:
    """The harness (every module of triton_ort.harness) and the request clients run where torch is not
    installed (the client image, a laptop with tritonclient only), and start without its half second."""
    import pkgutil

    import triton_ort.harness

    harness = [f"triton_ort.harness.{m.name}" for m in pkgutil.iter_modules(triton_ort.harness.__path__)]
    modules = [*harness, *_REQUEST_CLIENTS]
    code = f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
    code += "print('torch' in sys.modules)"
    checked = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == "False", f"importing {modules} loaded torch"


_DOCKER = Path(__file__).resolve().parents[2] / "docker"


def _normalized(distribution: str) -> str:
    return distribution.lower().replace("_", "-").replace(".", "-")


def test_the_client_image_entry_point_imports_only_what_the_image_installs() -> None:
    """The client image (docker/client.Dockerfile) runs its ENTRYPOINT module with the distributions that
    docker/requirements-client.txt pins and nothing else: every distribution that importing that module
    loads must be pinned there (onnx, torch and tqdm are not)."""
    dockerfile = (_DOCKER / "client.Dockerfile").read_text()
    entrypoint = json.loads(
        next(line for line in dockerfile.splitlines() if line.startswith("ENTRYPOINT"))[10:]
    )
    module = entrypoint[entrypoint.index("-m") + 1]
    code = (
        "import importlib, importlib.metadata, json, sys\n"
        "before = set(sys.modules)\n"
        f"importlib.import_module({module!r})\n"
        "owners = importlib.metadata.packages_distributions()\n"
        "top = {name.partition('.')[0] for name in set(sys.modules) - before}\n"
        "print(json.dumps(sorted({d for t in top for d in owners.get(t, [])})))"
    )
    checked = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr
    pinned = {
        _normalized(line.split("==")[0].strip())
        for line in (_DOCKER / "requirements-client.txt").read_text().splitlines()
        if "==" in line and not line.lstrip().startswith("#")
    }
    # this project itself: installed in the venv, copied into the image as triton_ort/
    loaded = {_normalized(name) for name in json.loads(checked.stdout)} - {"triton-ort"}
    assert loaded, f"importing {module} loaded no distribution at all: the check reads nothing"
    assert loaded <= pinned, f"{module} loads {sorted(loaded - pinned)}, which the client image lacks"


def test_the_runtime_imports_neither_the_harness_nor_the_cli() -> None:
    """docs/ARCHITECTURE.md's first rule: what model.py loads (the instance, auto-complete) never reaches
    triton_ort.harness or triton_ort.cli (a Triton image may ship triton_ort without tritonclient or
    psutil)."""
    code = (
        "import sys, triton_ort.runtime.instance, triton_ort.model.autocomplete\n"
        "print(sorted(m for m in sys.modules if m.startswith(('triton_ort.harness', 'triton_ort.cli'))))"
    )
    checked = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == "[]", checked.stdout
