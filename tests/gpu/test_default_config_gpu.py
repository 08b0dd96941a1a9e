"""The README's headline config on a GPU host (docs/gpu-host.md), skipped elsewhere: with it, CUDA-shared-
memory inputs reach the model on the GPU with no host<->device copy (counted by CUPTI); without its third
line (backend and max_batch_size only) the python backend copies them to the host, and the load says so in
one warning that names the line to add.

Triton gives auto-complete no way to set FORCE_CPU_ONLY_INPUT_TENSORS (triton_ort.model.autocomplete,
ZERO_COPY_LINE, cites the sources), so the headline config carries it; this test keeps both halves of that
claim honest on the real server: the line makes the difference, and the warning is given where it is missing.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from tests.support.paths import TF32_TOLERANCE, demo_onnx
from tests.support.readme import readme_blocks
from triton_ort.harness.waiting import wait_for
from triton_ort.model.autocomplete import ZERO_COPY_LINE
from triton_ort.runtime.copy_counter import cupti_counts_from_log
from triton_ort.runtime.stats import ExecuteStats

pytestmark = pytest.mark.gpu
T = TypeVar("T")

TF32 = TF32_TOLERANCE  # ORT's CUDA EP computes fp32 GEMMs in TF32 by default
ROWS = 8  # the headline config's max_batch_size


def _model(repository: Path, name: str, config: str) -> None:
    (repository / name / "1").mkdir(parents=True)
    shutil.copy(demo_onnx(), repository / name / "1" / "model.onnx")
    (repository / name / "config.pbtxt").write_text(config)


def _served_parameters(http_url: str, model: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{http_url}/v2/models/{model}/config", timeout=10) as reply:
        return dict(json.load(reply).get("parameters", {}))


def _first(records: list[T], count: int) -> list[T]:
    """The first `count` records once there are that many, else [] (not yet: the stubs' log lines reach
    the log after their responses)."""
    return records[:count] if len(records) >= count else []


def test_the_headline_config_is_zero_copy_for_cuda_shm_inputs_and_two_lines_warn(tmp_path: Path) -> None:
    import tritonclient.grpc as grpcclient

    from triton_ort.cli.cuda_shm import CudaShmIO
    from triton_ort.harness.reference import reference_outputs
    from triton_ort.harness.server import LocalTritonServer

    headline = readme_blocks()["config"]
    assert ZERO_COPY_LINE in headline, headline
    two_line = headline.replace(ZERO_COPY_LINE + "\n", "")
    assert two_line.count("\n") == 2, two_line
    repository = tmp_path / "repository"
    # Output placement `device` besides: the whole execute then makes no host<->device copy at all, where
    # the default (auto) copies a 64-byte output to the host on purpose (one DtoH).
    device_line = 'parameters { key: "output_placement" value { string_value: "device" } }\n'
    models = {"headline_device": headline + device_line, "headline": headline, "two_line": two_line}
    for name, config in models.items():
        _model(repository, name, config)
    x = np.random.default_rng(0).standard_normal((ROWS, 2010)).astype(np.float32)
    want = reference_outputs(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    layout = {"np_logits": (np.dtype(np.float32), (ROWS, 2))}
    debug = {"TRITON_ORT_LOG_LEVEL": "DEBUG", "TRITON_ORT_COUNT_COPIES": "1"}
    answers: dict[str, Any] = {}
    executes: list[ExecuteStats] = []
    cupti: list[dict[str, int]] = []
    with LocalTritonServer(repository, log_verbose=1, env=debug) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        parameters = {name: _served_parameters(server.http_url, name) for name in models}
        loaded = len(server.log())  # the warm-up runs at load log records too
        for count, name in enumerate(models, 1):
            # One model at a time, each request's records awaited: three stubs log into one file.
            with CudaShmIO(client, name, {"np_script_embeddings": x}, layout) as shm:
                shm.infer()
                answers[name] = shm.read_outputs()["np_logits"]

            def records(n: int = count) -> list[ExecuteStats]:
                return _first(ExecuteStats.from_log(server.log()[loaded:]), n)

            def counts(n: int = count) -> list[dict[str, int]]:
                return _first(cupti_counts_from_log(server.log()[loaded:]), n)

            executes = wait_for(records, 30, f"{count} execute records")
            cupti = wait_for(counts, 30, f"{count} CUPTI counts")
        log = server.log()
    for name, got in answers.items():
        np.testing.assert_allclose(got, want, **TF32, err_msg=name)
    assert parameters["headline"]["FORCE_CPU_ONLY_INPUT_TENSORS"] == {"string_value": "no"}, parameters
    assert "FORCE_CPU_ONLY_INPUT_TENSORS" not in parameters["two_line"], parameters  # auto-complete can't
    by_model = dict(zip(models, executes, strict=True))
    copies = dict(zip(models, cupti, strict=True))
    print(json.dumps({"executes": {k: str(v) for k, v in by_model.items()}, "cupti": copies}, indent=1))
    # The headline config: the CUDA-shm input is bound on the GPU where it arrived.
    assert by_model["headline_device"].input_devices == ["cuda:0"], by_model
    assert copies["headline_device"] == {"HtoD": 0, "DtoH": 0}, copies
    assert by_model["headline"].input_devices == ["cuda:0"], by_model
    assert copies["headline"] == {"HtoD": 0, "DtoH": 1}, copies  # the small output, to the host on purpose
    # Two lines: the python backend delivered the input on the host; our staging copy takes it back.
    assert by_model["two_line"].input_devices == ["cpu"], by_model
    assert copies["two_line"]["HtoD"] == 1, copies
    warnings = [line for line in log.splitlines() if ZERO_COPY_LINE in line]
    assert len(warnings) == 1 and "'two_line'" in warnings[0], warnings
