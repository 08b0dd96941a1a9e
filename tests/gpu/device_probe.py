"""Run in a fresh process by test_multi_gpu.py: a ModelInstance on one GPU serves requests, then the probe
reports which GPUs hold a CUDA primary context in this process (a context costs ~500 MiB of GPU memory).

    python -m tests.gpu.device_probe --device 1 --onnx model.onnx --config config.pbtxt
prints one JSON object: contexts before and after serving, the answers' largest error, the copy counts.
"""

from __future__ import annotations

import argparse
import ctypes
import json
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2


def primary_contexts() -> list[bool]:
    """Per GPU: whether this process has initialised its CUDA primary context (driver API, no side
    effect: cuDevicePrimaryCtxGetState neither creates nor retains a context)."""
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    count = ctypes.c_int()
    assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
    active = []
    for ordinal in range(count.value):
        device, flags, state = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
        assert cuda.cuDeviceGet(ctypes.byref(device), ordinal) == 0
        assert cuda.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(state)) == 0
        active.append(bool(state.value))
    return active


def triton_model_config(config_pbtxt: Path) -> dict[str, Any]:
    """config.pbtxt as the JSON Triton hands to initialize()."""
    message = text_format.Parse(config_pbtxt.read_text(), model_config_pb2.ModelConfig())
    config: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return config


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", type=int, required=True)
    parser.add_argument("--onnx", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args()
    before = primary_contexts()  # nothing CUDA has run yet

    import onnxruntime as ort
    import torch

    from triton_ort import ModelInstance

    version_dir = args.onnx.parent
    config = triton_model_config(args.config)
    config.setdefault("parameters", {})["onnx_file"] = {"string_value": args.onnx.name}
    instance = ModelInstance(config, version_dir, instance_kind="GPU", device_id=args.device)
    x = np.random.default_rng(0).standard_normal((64, 2010)).astype(np.float32)
    reference = ort.InferenceSession(str(args.onnx), providers=["CPUExecutionProvider"])
    want = reference.run(None, {"np_script_embeddings": x})[0]
    own = torch.device("cuda", args.device)
    answers = [
        instance.infer([{"np_script_embeddings": torch.from_numpy(x)}])[0],  # a numpy request
        instance.infer([{"np_script_embeddings": torch.from_numpy(x).to(own)}])[0],  # CUDA shm, same GPU
    ]
    after = primary_contexts()
    errors = []
    for answer in answers:
        assert not isinstance(answer, Exception), answer
        errors.append(float(np.abs(answer["np_logits"].cpu().numpy() - want).max()))
    print(
        json.dumps(
            {
                "contexts_before": before,
                "contexts_after": after,
                "max_abs_error": max(errors),
                "host_to_device_copies": instance.runner.stats.host_to_device_copies,
                "device_to_device_copies": instance.runner.stats.device_to_device_copies,
            }
        )
    )


if __name__ == "__main__":
    main()
