"""What the reliability tests share: raw KServe v2 requests (JSON, binary, protobuf), Triton's statistics,
reference answers, and the measurements printed at the end of the run."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from client.triton_client import reference_outputs
from tests.paths import SERVER_TOLERANCE, demo_onnx

DEMO_INPUT = "np_script_embeddings"
DEMO_OUTPUT = "np_logits"
CLIENT_ERROR = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}

MEASUREMENTS: list[str] = []
"""Numbers the tests measured (recovery time, memory, ...), printed in pytest's terminal summary."""

T = TypeVar("T")


def measured(text: str) -> None:
    MEASUREMENTS.append(text)
    print(text)


@dataclass(frozen=True)
class Answer:
    """What the server said: `status` is 'OK', an HTTP code ('400') or a gRPC code ('StatusCode.X'),
    or 'NO_ANSWER' when the transport failed."""

    status: str
    message: str = ""
    outputs: Mapping[str, np.ndarray] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "OK"


def client_for(protocol: str, url: str) -> Any:
    return (httpclient if protocol == "http" else grpcclient).InferenceServerClient(url)


def tritonclient_infer(
    protocol: str,
    url: str,
    model: str,
    inputs: list[tuple[str, np.ndarray]] | list[tuple[str, np.ndarray, str]],
    outputs: list[str] | None = None,
    timeout_s: float = 60.0,
) -> Answer:
    """One request through tritonclient; the datatype defaults to the array's."""
    module = httpclient if protocol == "http" else grpcclient
    client = (
        httpclient.InferenceServerClient(url, network_timeout=timeout_s, connection_timeout=timeout_s)
        if protocol == "http"
        else grpcclient.InferenceServerClient(url)
    )
    items = []
    for entry in inputs:
        name, array = entry[0], entry[1]
        datatype = entry[2] if len(entry) > 2 else np_to_triton_dtype(array.dtype)  # type: ignore[misc]
        item = module.InferInput(name, list(array.shape), datatype)
        item.set_data_from_numpy(array)
        items.append(item)
    requested = [module.InferRequestedOutput(name) for name in outputs] if outputs else None
    try:
        if protocol == "grpc":
            result = client.infer(model, items, outputs=requested, client_timeout=timeout_s)
        else:
            result = client.infer(model, items, outputs=requested)
    except InferenceServerException as error:
        return Answer(str(error.status()), str(error.message()))
    except Exception as error:  # the transport failed: no answer came
        return Answer("NO_ANSWER", f"{type(error).__name__}: {error}")
    names = outputs or [o["name"] for o in _response_outputs(result)]
    return Answer("OK", outputs={name: result.as_numpy(name) for name in names})


def _response_outputs(result: Any) -> list[dict[str, Any]]:
    response = result.get_response()
    if isinstance(response, dict):
        return list(response["outputs"])
    return [{"name": output.name} for output in response.outputs]


def http_raw(
    url: str, model: str, body: bytes | Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> Answer:
    """A hand-written KServe v2 HTTP request: JSON, or JSON header plus binary tensors."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://{url}/v2/models/{model}/infer",
        data=data,
        headers=dict(headers or {"Content-Type": "application/json"}),
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            raw = reply.read()
            header_length = reply.headers.get("Inference-Header-Content-Length")
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        with contextlib.suppress(ValueError, KeyError):
            text = json.loads(text)["error"]
        return Answer(str(error.code), text)
    header = json.loads(raw[: int(header_length)] if header_length else raw)
    return Answer("OK", outputs=_decode_http_outputs(header, raw[int(header_length or len(raw)) :]))


def _decode_http_outputs(header: Mapping[str, Any], binary: bytes) -> dict[str, np.ndarray]:
    from tritonclient.utils import triton_to_np_dtype

    outputs, offset = {}, 0
    for output in header["outputs"]:
        dtype = np.dtype(triton_to_np_dtype(output["datatype"]))
        size = output.get("parameters", {}).get("binary_data_size")
        if size is None:
            outputs[output["name"]] = np.array(output["data"], dtype=dtype).reshape(output["shape"])
        else:
            chunk = binary[offset : offset + size]
            offset += size
            outputs[output["name"]] = np.frombuffer(chunk, dtype=dtype).reshape(output["shape"])
    return outputs


def binary_body(tensors: list[tuple[str, list[int], str, bytes]], outputs: list[str]) -> tuple[bytes, dict]:
    """The binary-tensor extension: a JSON header that gives each tensor's byte count, then the bytes."""
    header = {
        "inputs": [
            {"name": n, "shape": s, "datatype": d, "parameters": {"binary_data_size": len(b)}}
            for n, s, d, b in tensors
        ],
        "outputs": [{"name": name, "parameters": {"binary_data": True}} for name in outputs],
    }
    encoded = json.dumps(header).encode()
    body = encoded + b"".join(b for *_, b in tensors)
    return body, {
        "Inference-Header-Content-Length": str(len(encoded)),
        "Content-Type": "application/octet-stream",
    }


def grpc_raw(url: str, model: str, tensors: list[tuple[str, list[int], str, bytes]]) -> Answer:
    """A hand-built ModelInferRequest (raw_input_contents), bypassing tritonclient's own checks."""
    request = service_pb2.ModelInferRequest(model_name=model)
    for name, shape, datatype, raw in tensors:
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = name, datatype
        tensor.shape.extend(shape)
        request.raw_input_contents.append(raw)
    with grpc.insecure_channel(url) as channel:
        try:
            reply = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=60)
        except grpc.RpcError as error:
            return Answer(str(error.code()), str(error.details()))
    from tritonclient.utils import triton_to_np_dtype

    return Answer(
        "OK",
        outputs={
            output.name: np.frombuffer(raw, dtype=triton_to_np_dtype(output.datatype)).reshape(output.shape)
            for output, raw in zip(reply.outputs, reply.raw_output_contents, strict=True)
        },
    )


def demo_reference(x: np.ndarray) -> np.ndarray:
    return reference_outputs(demo_onnx(), {DEMO_INPUT: x})[DEMO_OUTPUT]


def assert_demo_answer(answer: Answer, x: np.ndarray) -> None:
    assert answer.ok, f"a good request failed: {answer.status} {answer.message}"
    assert answer.outputs is not None
    np.testing.assert_allclose(answer.outputs[DEMO_OUTPUT], demo_reference(x), **SERVER_TOLERANCE)


def statistics(http_url: str, model: str) -> dict[str, Any]:
    """Triton's counters for a model: executions, inferences (rows) and executions per batch size."""
    stats = httpclient.InferenceServerClient(http_url).get_inference_statistics(model)["model_stats"][0]
    return {
        "executions": int(stats["execution_count"]),
        "inferences": int(stats["inference_count"]),
        "requests": int(stats["inference_stats"]["success"]["count"])
        + int(stats["inference_stats"]["fail"]["count"]),
        "batches": {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]},
    }


def new_batches(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[int, int]:
    """Executions per batch size (rows) between two statistics() readings."""
    return {
        size: count - before["batches"].get(size, 0)
        for size, count in after["batches"].items()
        if count != before["batches"].get(size, 0)
    }


def wait_for(condition: Callable[[], T], timeout_s: float, interval_s: float = 0.1) -> T:
    """Poll until `condition()` is truthy; return it, or fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)
