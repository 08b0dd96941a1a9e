"""A repository that mixes our backend with others, on the real tritonserver (triton-ort serve --backend
NAME=DIR, a --backend-directory after --, --exit-on-error=false): the other backends are linked beside the
python backend and ours instead of replacing them, a backend built against Triton's core finds it under
the name it links (libtritonserver.so; nvidia-pytriton ships it renamed), and a model that nothing serves
fails alone when the server is asked to serve what loads.

The second backends here are real ones of two kinds: Python-based backends (a folder with model.py, as
ours is) and a C backend compiled here against a stand-in core library named as Triton's is."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from google.protobuf import text_format
from onnx import TensorProto
from tritonclient.grpc import model_config_pb2

from tests.support import graphs
from tests.support.launcher import READY, Launched, launch, launcher_command
from triton_ort.harness.checks import ServerStartError
from triton_ort.harness.server import LocalTritonServer, free_ports
from triton_ort.harness.waiting import wait_for

pytestmark = pytest.mark.integration

# A Python-based backend: the python backend runs backends/<name>/model.py for the models naming <name>.
SCALING_BACKEND = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy() * {factor})]
            )
            for r in requests
        ]
"""

# A C backend as backends are built: linked against libtritonserver.so (here a stand-in of that name),
# calling into the core. Triton needs only its execute function to load a model of it.
C_BACKEND = """
#include <stdint.h>
typedef struct TRITONSERVER_Error TRITONSERVER_Error;
extern TRITONSERVER_Error* TRITONSERVER_ApiVersion(uint32_t* major, uint32_t* minor);
TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(void* instance, void** requests, uint32_t count) {
  uint32_t major, minor;
  return TRITONSERVER_ApiVersion(&major, &minor);
}
"""
STAND_IN_CORE = """
#include <stdint.h>
void* TRITONSERVER_ApiVersion(uint32_t* major, uint32_t* minor) { return 0; }
"""


def _model(repository: Path, name: str, backend: str, onnx: bool = False) -> None:
    """x FP32[2] -> y, one CPU instance, served by `backend` (an identity ONNX file where `onnx`)."""
    version = repository / name / "1"
    version.mkdir(parents=True)
    if onnx:
        graphs.identity(version / "model.onnx", TensorProto.FLOAT)
    config = model_config_pb2.ModelConfig(name=name, backend=backend, max_batch_size=8)
    for tensors, tensor_name in ((config.input, "x"), (config.output, "y")):
        tensors.add(name=tensor_name, data_type=model_config_pb2.TYPE_FP32, dims=[2])
    config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU, count=1)
    (repository / name / "config.pbtxt").write_text(text_format.MessageToString(config))


def _scaling_backend(folder: Path, factor: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.py").write_text(SCALING_BACKEND.replace("{factor}", str(factor)))
    return folder


def _answer(url: str, model: str) -> list[list[float]]:
    """The model's answer to x = [[1, 2]], divided by x: the factor its backend applies."""
    x = np.array([[1.0, 2.0]], np.float32)
    item = httpclient.InferInput("x", [1, 2], "FP32")
    item.set_data_from_numpy(x)
    answer = httpclient.InferenceServerClient(url).infer(model, [item]).as_numpy("y")
    assert answer is not None
    return list((answer / x).tolist())


def _serve(repository: Path, options: list[str], tmpdir: Path) -> tuple[Launched, str]:
    """triton-ort serve on `repository` with `options`, on free ports, until it says it is ready; (the
    launcher, its HTTP address)."""
    http, grpc, metrics = free_ports(3)
    launched = launch([*launcher_command(repository, (http, grpc, metrics)), *options], tmpdir)
    launched.wait_for_line(READY, 300)
    return launched, f"127.0.0.1:{http}"


def _stop(launched: Launched) -> str:
    """Ctrl-C, as a user stops it; everything it printed."""
    launched.process.send_signal(signal.SIGINT)
    launched.process.wait(timeout=60)
    return launched.output()


def test_serve_links_other_backends_beside_ours_from_the_cli(tmp_path: Path) -> None:
    """--backend NAME=DIR and a --backend-directory after -- (which would replace the launcher's backend
    directory, python backend included): three backends answer from one repository."""
    repository = tmp_path / "repository"
    _model(repository, "ours", "onnxruntime_zerocopy", onnx=True)
    _model(repository, "doubled", "doubler")
    _model(repository, "tripled", "tripler")
    doubler = _scaling_backend(tmp_path / "doubler", 2)
    _scaling_backend(tmp_path / "more_backends" / "tripler", 3)
    more = tmp_path / "more_backends"
    options = [f"--backend=doubler={doubler}", "--", f"--backend-directory={more}"]
    launched, url = _serve(repository, options, tmp_path / "tmp")
    try:
        assert _answer(url, "ours") == [[1.0, 1.0]]
        assert _answer(url, "doubled") == [[2.0, 2.0]]
        assert _answer(url, "tripled") == [[3.0, 3.0]]
    finally:
        _stop(launched)


def test_a_model_nothing_serves_fails_alone_when_the_server_serves_what_loads(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    _model(repository, "ours", "onnxruntime_zerocopy", onnx=True)
    _model(repository, "native", "onnxruntime", onnx=True)
    launched, url = _serve(repository, ["--", "--exit-on-error=false"], tmp_path / "tmp")
    try:
        assert _answer(url, "ours") == [[1.0, 1.0]]
        assert not httpclient.InferenceServerClient(url).is_model_ready("native")
    finally:
        output = _stop(launched)
    refused = [line for line in output.splitlines() if line.startswith("model 'native'")]
    assert len(refused) == 1, output  # one line, the check's: it names the backends the server has
    assert "backend 'onnxruntime' is not one the server has" in refused[0], output


def test_a_backend_folder_without_its_library_is_one_line_before_any_start(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    _model(repository, "native", "onnxruntime", onnx=True)
    empty = tmp_path / "onnxruntime"
    empty.mkdir()
    # on free ports: the check comes before any start, but after the ports' (a taken 8000 was reported)
    http, grpc, metrics = free_ports(3)
    done = subprocess.run(
        [*launcher_command(repository, (http, grpc, metrics)), f"--backend=onnxruntime={empty}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"backend 'onnxruntime': {empty} holds neither libtriton_onnxruntime.so nor model.py (give the "
        "backend's own folder, e.g. /opt/tritonserver/backends/onnxruntime in NGC's tritonserver images)"
    ], done.stderr


@pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("readelf") is None,
    reason="no gcc and readelf here to build a C backend and read what it links",
)
def test_a_c_backend_linked_against_libtritonserver_so_loads(tmp_path: Path) -> None:
    """nvidia-pytriton ships the core as libtritonserver-<hash>.so; a backend built the usual way needs
    libtritonserver.so, which the launcher links to that core (without it: 'unable to load shared
    library: libtritonserver.so')."""
    build = tmp_path / "build"
    build.mkdir()
    (build / "core.c").write_text(STAND_IN_CORE)
    (build / "backend.c").write_text(C_BACKEND)
    folder = tmp_path / "cnull"
    folder.mkdir()
    gcc = ["gcc", "-shared", "-fPIC"]
    core = ["-Wl,-soname,libtritonserver.so", "-o", str(build / "libtritonserver.so"), str(build / "core.c")]
    subprocess.run([*gcc, *core], check=True)
    backend = ["-o", str(folder / "libtriton_cnull.so"), str(build / "backend.c")]
    subprocess.run([*gcc, *backend, f"-L{build}", "-Wl,--no-as-needed", "-ltritonserver"], check=True)
    readelf = ["readelf", "-d", str(folder / "libtriton_cnull.so")]
    needed = subprocess.run(readelf, capture_output=True, text=True, check=True)
    assert "[libtritonserver.so]" in needed.stdout  # as a backend built against Triton's core
    shutil.rmtree(build)  # the stand-in is gone: only the launcher's link can provide the name
    repository = tmp_path / "repository"
    _model(repository, "cnull", "cnull")
    try:
        with LocalTritonServer(repository, backends={"cnull": folder}) as server:
            client = httpclient.InferenceServerClient(server.http_url)
            assert wait_for(lambda: client.is_model_ready("cnull"), 30, "the C backend's model ready")
    except ServerStartError as error:
        pytest.fail(f"the C backend did not load: {error}")
