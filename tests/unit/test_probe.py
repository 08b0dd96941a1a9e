"""The probe's request of zeros and its default URL (src/triton_ort/probe.py); the probe against a real
server is tests/integration/test_probe.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from triton_ort import probe as probe_module
from triton_ort.probe import ProbeError, Verdict, default_url, zeros_request


def _header(body: bytes, headers: dict[str, str]) -> dict[str, object]:
    length = int(headers["Inference-Header-Content-Length"])
    parsed: dict[str, object] = json.loads(body[:length])
    return parsed


def test_zeros_take_batch_one_and_every_open_axis_one_in_the_binary_extension() -> None:
    config = {
        "max_batch_size": 8,
        "input": [
            {"name": "ids", "data_type": "TYPE_INT64", "dims": ["-1"]},
            {"name": "image", "data_type": "TYPE_FP16", "dims": [3, -1, 4]},
            {"name": "text", "data_type": "TYPE_STRING", "dims": [2]},
            {"name": "mask", "data_type": "TYPE_BOOL", "dims": [5], "optional": True},
        ],
    }
    body, headers = zeros_request(config)
    header = _header(body, headers)
    assert header["inputs"] == [
        {"name": "ids", "shape": [1, 1], "datatype": "INT64", "parameters": {"binary_data_size": 8}},
        {"name": "image", "shape": [1, 3, 1, 4], "datatype": "FP16", "parameters": {"binary_data_size": 24}},
        # a BYTES element is an empty string: its 4-byte length
        {"name": "text", "shape": [1, 2], "datatype": "BYTES", "parameters": {"binary_data_size": 8}},
    ]
    assert header["parameters"] == {"binary_data_output": True}
    assert body[int(headers["Inference-Header-Content-Length"]) :] == bytes(8 + 24 + 8)


def test_a_model_without_batching_gets_its_dims_as_they_are() -> None:
    body, headers = zeros_request({"input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [2, 3]}]})
    assert _header(body, headers)["inputs"] == [
        {"name": "x", "shape": [2, 3], "datatype": "FP32", "parameters": {"binary_data_size": 24}}
    ]


@pytest.mark.parametrize(
    ("env", "url"),
    [
        ({}, "http://127.0.0.1:8000"),
        ({"TRITON_HTTP_PORT": "18500", "TRITON_BIND_ADDRESS": "0.0.0.0"}, "http://127.0.0.1:18500"),
        ({"TRITON_BIND_ADDRESS": "10.0.0.7"}, "http://10.0.0.7:8000"),
        ({"TRITON_ORT_PROBE_URL": "http://triton:9000", "TRITON_HTTP_PORT": "1"}, "http://triton:9000"),
    ],
)
def test_the_default_url_is_where_the_entrypoint_started_tritonserver(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], url: str
) -> None:
    for name in ("TRITON_ORT_PROBE_URL", "TRITON_HTTP_PORT", "TRITON_BIND_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert default_url() == url


def test_the_watchdog_arms_within_a_second_of_the_first_answer_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Until a first probe passes (the load) the watchdog probes every second, so a server that hangs soon
    after it became ready is still caught; it says once when it starts counting, and from then on probes
    every interval. (Probing only every interval left a server stopped in its first seconds never killed.)"""
    script: list[object] = [
        ProbeError("no ready model"),
        ProbeError("no ready model"),
        "ok",
        "dead",
        "dead",
        "dead",
    ]
    slept: list[float] = []
    killed: list[int] = []

    def scripted_probe(base_url: str, models: object, timeout_s: float) -> list[Verdict]:
        step = script.pop(0)
        if isinstance(step, ProbeError):
            raise step
        return [Verdict("demo", step == "ok", "answered" if step == "ok" else "no answer within 8 s")]

    monkeypatch.setattr(probe_module, "probe", scripted_probe)
    monkeypatch.setattr(probe_module, "_process_alive", lambda pid: not killed)
    monkeypatch.setattr(probe_module, "_kill", killed.append)
    monkeypatch.setattr(probe_module, "time", SimpleNamespace(sleep=slept.append))

    assert probe_module.watch("http://x", [], 8.0, 4242, 10.0, 3) == 1
    assert killed == [4242] and not script
    # two while loading, one after the first pass; then the interval between failures
    assert slept == [1.0, 1.0, 10.0, 10.0, 10.0]
    said = capsys.readouterr().err
    assert said.count("probe: watching tritonserver (pid 4242)") == 1
    assert said.index("watching") < said.index("did not answer 3 probes in a row")
