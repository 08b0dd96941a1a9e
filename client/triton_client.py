"""Helpers shared by the CLI, the smoke check and the benchmark: one code path for HTTP and gRPC."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import triton_to_np_dtype

PROTOCOLS: dict[str, ModuleType] = {"http": httpclient, "grpc": grpcclient}


@dataclass(frozen=True)
class TensorMeta:
    name: str
    datatype: str  # Triton wire type, e.g. FP32
    shape: tuple[int, ...]  # -1 for variable axes


def make_client(protocol: str, url: str) -> Any:
    return PROTOCOLS[protocol].InferenceServerClient(url)


def _as_dict(reply: Any) -> dict[str, Any]:
    return reply if isinstance(reply, dict) else {}


def model_metadata(client: Any, model: str) -> dict[str, Any]:
    if isinstance(client, grpcclient.InferenceServerClient):
        return _as_dict(client.get_model_metadata(model, as_json=True))
    return _as_dict(client.get_model_metadata(model))


def model_config(client: Any, model: str) -> dict[str, Any]:
    if isinstance(client, grpcclient.InferenceServerClient):
        return _as_dict(client.get_model_config(model, as_json=True)).get("config", {})
    return _as_dict(client.get_model_config(model))


def tensor_metas(metadata: Mapping[str, Any], kind: str) -> list[TensorMeta]:
    return [TensorMeta(t["name"], t["datatype"], tuple(int(d) for d in t["shape"])) for t in metadata[kind]]


def random_inputs(metas: list[TensorMeta], batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of the model's shapes and types; variable axes take `batch` (first) or 1."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for meta in metas:
        shape = [batch if (d < 0 and axis == 0) else (1 if d < 0 else d) for axis, d in enumerate(meta.shape)]
        dtype = np.dtype(triton_to_np_dtype(meta.datatype))
        if dtype.kind == "f":
            arrays[meta.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            arrays[meta.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            arrays[meta.name] = rng.integers(0, 100, shape).astype(dtype)
    return arrays


def infer(
    client: Any, model: str, inputs: Mapping[str, np.ndarray], output_names: list[str]
) -> tuple[dict[str, np.ndarray], float]:
    """One request with numpy tensors in the body; returns the outputs and the latency in seconds."""
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    infer_inputs = []
    for name, array in inputs.items():
        item = module.InferInput(name, list(array.shape), _wire_type(array.dtype))
        item.set_data_from_numpy(array)
        infer_inputs.append(item)
    requested = [module.InferRequestedOutput(name) for name in output_names]
    started = time.perf_counter()
    result = client.infer(model, infer_inputs, outputs=requested)
    latency = time.perf_counter() - started
    return {name: result.as_numpy(name) for name in output_names}, latency


def _wire_type(dtype: np.dtype[Any]) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(dtype))


def reference_outputs(onnx_path: Path, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What in-process ONNX Runtime on CPU says for the same inputs: the answer to check against."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(inputs)), strict=True))


def compare(
    got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], rtol: float, atol: float
) -> list[str]:
    """Differences, in words; empty when every output matches."""
    problems = []
    for name, expected in want.items():
        if name not in got:
            problems.append(f"output {name!r} missing")
            continue
        actual = got[name]
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            problems.append(
                f"output {name!r}: got {actual.dtype}{list(actual.shape)}, "
                f"expected {expected.dtype}{list(expected.shape)}"
            )
        elif not np.allclose(actual, expected, rtol=rtol, atol=atol):
            worst = float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))
            problems.append(
                f"output {name!r}: max abs difference {worst:.3g} beyond rtol {rtol}, atol {atol}"
            )
    return problems
