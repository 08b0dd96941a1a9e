"""Talking to a tritonserver, the same way for client/ and tests/: numpy -> InferInput, one request through
tritonclient (HTTP or gRPC), hand-written KServe v2 requests (JSON, binary, protobuf) that bypass
tritonclient's own checks, model metadata, and Triton's statistics."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from numpy.typing import NDArray
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, np_to_triton_dtype, triton_to_np_dtype

PROTOCOLS: dict[str, ModuleType] = {"http": httpclient, "grpc": grpcclient}


class WireTensor(NamedTuple):
    """A request tensor; `datatype` (Triton's wire type, e.g. FP32) defaults to the array's."""

    name: str
    array: NDArray[Any]
    datatype: str | None = None

    @property
    def wire_type(self) -> str:
        return self.datatype or str(np_to_triton_dtype(self.array.dtype))


# A mapping name -> array, or (name, array[, datatype]) tuples (a WireTensor is one).
GivenTensors = Mapping[str, Any] | Iterable[tuple[Any, ...]]


def wire_tensors(tensors: GivenTensors) -> list[WireTensor]:
    if isinstance(tensors, Mapping):
        return [WireTensor(name, array) for name, array in tensors.items()]
    return [WireTensor(*tensor) for tensor in tensors]


def infer_inputs(module: ModuleType, tensors: GivenTensors) -> list[Any]:
    """The InferInputs of `module` (tritonclient.http, .grpc, or their .aio) carrying numpy in the body."""
    items = []
    for tensor in wire_tensors(tensors):
        item = module.InferInput(tensor.name, list(tensor.array.shape), tensor.wire_type)
        item.set_data_from_numpy(tensor.array)
        items.append(item)
    return items


def client_module(client: Any) -> ModuleType:
    """tritonclient.grpc or tritonclient.http, whichever `client` belongs to."""
    module: ModuleType = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    return module


def make_client(protocol: str, url: str) -> Any:
    return PROTOCOLS[protocol].InferenceServerClient(url)


@dataclass(frozen=True)
class TensorMeta:
    name: str
    datatype: str  # Triton wire type, e.g. FP32
    shape: tuple[int, ...]  # -1 for variable axes


def _as_dict(reply: Any) -> dict[str, Any]:
    return reply if isinstance(reply, dict) else {}


def model_metadata(client: Any, model: str) -> dict[str, Any]:
    if isinstance(client, grpcclient.InferenceServerClient):
        return _as_dict(client.get_model_metadata(model, as_json=True))
    return _as_dict(client.get_model_metadata(model))


def model_config(client: Any, model: str) -> dict[str, Any]:
    if isinstance(client, grpcclient.InferenceServerClient):
        return _as_dict(_as_dict(client.get_model_config(model, as_json=True)).get("config"))
    return _as_dict(client.get_model_config(model))


def tensor_metas(metadata: Mapping[str, Any], kind: str) -> list[TensorMeta]:
    return [TensorMeta(t["name"], t["datatype"], tuple(int(d) for d in t["shape"])) for t in metadata[kind]]


def infer(
    client: Any, model: str, inputs: GivenTensors, output_names: list[str]
) -> tuple[dict[str, NDArray[Any]], float]:
    """One request with numpy tensors in the body; returns the outputs and the latency in seconds."""
    module = client_module(client)
    requested = [module.InferRequestedOutput(name) for name in output_names]
    items = infer_inputs(module, inputs)
    started = time.perf_counter()
    result = client.infer(model, items, outputs=requested)
    latency = time.perf_counter() - started
    return {name: result.as_numpy(name) for name in output_names}, latency


@dataclass(frozen=True)
class Answer:
    """What the server said: `status` is 'OK', an HTTP code ('400') or a gRPC code ('StatusCode.X'),
    or 'NO_ANSWER' when the transport failed."""

    status: str
    message: str = ""
    outputs: Mapping[str, NDArray[Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "OK"


def tritonclient_infer(
    protocol: str,
    url: str,
    model: str,
    inputs: GivenTensors,
    outputs: list[str] | None = None,
    timeout_s: float = 60.0,
) -> Answer:
    """One request through tritonclient, every outcome as an Answer (no exception)."""
    module = PROTOCOLS[protocol]
    items = infer_inputs(module, inputs)
    requested = [module.InferRequestedOutput(name) for name in outputs] if outputs else None
    try:
        if protocol == "grpc":
            result = grpcclient.InferenceServerClient(url).infer(
                model, items, outputs=requested, client_timeout=timeout_s
            )
        else:
            client = httpclient.InferenceServerClient(
                url, network_timeout=timeout_s, connection_timeout=timeout_s
            )
            result = client.infer(model, items, outputs=requested)
    except InferenceServerException as error:
        return Answer(str(error.status()), str(error.message()))
    except Exception as error:  # the transport failed: no answer came
        return Answer("NO_ANSWER", f"{type(error).__name__}: {error}")
    response = result.get_response()
    names = outputs or [
        output["name"] if isinstance(output, dict) else output.name
        for output in (response["outputs"] if isinstance(response, dict) else response.outputs)
    ]
    return Answer("OK", outputs={name: result.as_numpy(name) for name in names})


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


def _decode_http_outputs(header: Mapping[str, Any], binary: bytes) -> dict[str, NDArray[Any]]:
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


RawTensor = tuple[str, list[int], str, bytes]
"""name, shape, datatype and payload, as a hand-written request states them (they need not agree)."""


def binary_body(tensors: list[RawTensor], outputs: list[str]) -> tuple[bytes, dict[str, str]]:
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


def grpc_raw(url: str, model: str, tensors: list[RawTensor]) -> Answer:
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
    return Answer(
        "OK",
        outputs={
            output.name: np.frombuffer(raw, dtype=triton_to_np_dtype(output.datatype)).reshape(output.shape)
            for output, raw in zip(reply.outputs, reply.raw_output_contents, strict=True)
        },
    )


# The per-request stages of Triton's statistics (KServe v2 statistics extension), in pipeline order.
STAGES = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class ModelStatistics:
    """Triton's counters for one model: executions, inferences (rows), requests, executions per batch
    size, and each stage's (count, total ns)."""

    executions: int
    inferences: int
    requests: int
    batches: dict[int, int]
    stages: dict[str, tuple[int, int]]
    execute_compute_infer_ns: int = 0
    """compute_infer summed over executions (the batch statistics: one entry per execute, where the stages
    count one per request)."""

    @classmethod
    def read(cls, client: Any, model: str) -> ModelStatistics:
        """From a tritonclient HTTP or gRPC client."""
        if isinstance(client, grpcclient.InferenceServerClient):
            reply = client.get_inference_statistics(model, as_json=True)
        else:
            reply = client.get_inference_statistics(model)
        return cls.from_reply(reply)

    @classmethod
    def from_reply(cls, reply: Mapping[str, Any]) -> ModelStatistics:
        """From the statistics reply in JSON (HTTP, or gRPC with as_json=True; their async clients too)."""
        entry = reply["model_stats"][0]
        # gRPC's JSON leaves out what is still zero (a model that has not answered yet has no counts)
        stats = entry.get("inference_stats", {})
        batch_stats = entry.get("batch_stats", [])

        def count(stage: str) -> int:
            return int(stats.get(stage, {}).get("count", 0))

        return cls(
            executions=int(entry.get("execution_count", 0)),
            inferences=int(entry.get("inference_count", 0)),
            requests=count("success") + count("fail"),
            batches={int(b["batch_size"]): int(b["compute_infer"].get("count", 0)) for b in batch_stats},
            stages={s: (count(s), int(stats.get(s, {}).get("ns", 0))) for s in STAGES},
            execute_compute_infer_ns=sum(int(b["compute_infer"].get("ns", 0)) for b in batch_stats),
        )

    def new_batches(self, before: ModelStatistics) -> dict[int, int]:
        """Executions per batch size (rows) since `before`."""
        return {
            size: count - before.batches.get(size, 0)
            for size, count in self.batches.items()
            if count != before.batches.get(size, 0)
        }

    def stage_us(self, before: ModelStatistics) -> dict[str, float]:
        """Each stage's mean time per request (µs) since `before`."""
        means = {}
        for stage in STAGES:
            count = self.stages[stage][0] - before.stages[stage][0]
            means[stage] = (self.stages[stage][1] - before.stages[stage][1]) / count / 1e3 if count else 0.0
        return means


def statistics(http_url: str, model: str) -> ModelStatistics:
    return ModelStatistics.read(httpclient.InferenceServerClient(http_url), model)
