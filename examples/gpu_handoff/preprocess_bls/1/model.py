"""Upstream model of the GPU hand-off example: pre-processing in torch on the instance's device, then the
ONNX classifier, fed on the same device.

- With parameter `downstream_model` (preprocess_bls): it calls that model itself through BLS, handing the
  torch tensor over through DLPack and asking for the answer on its own device (`preferred_memory`), and
  returns the answer.
- Without it (preprocess_step): it returns the pre-processed tensor; Triton's ensemble scheduler passes it on.

On a GPU instance nothing here leaves the GPU: the tensor preprocess writes is the memory the classifier's
ONNX Runtime session reads (docs/hooks.md, "Hand-off between models").
"""

from __future__ import annotations

import json

import torch
import triton_python_backend_utils as pb_utils

CENTRE = 127.5  # uint8 0..255 -> -1..1, as the classifier was trained


def _error(message: str) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message))


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        parameters = config.get("parameters", {})
        self.downstream = parameters.get("downstream_model", {}).get("string_value", "")
        gpu = args["model_instance_kind"] == "GPU"
        device_id = int(args["model_instance_device_id"])
        self.device = torch.device(f"cuda:{device_id}" if gpu else "cpu")
        # Without preferred_memory a BLS answer may come back in host memory (python backend r23.12,
        # src/request_executor.cc: the output allocator places it where the preference says).
        memory = pb_utils.TRITONSERVER_MEMORY_GPU if gpu else pb_utils.TRITONSERVER_MEMORY_CPU
        self.preferred_memory = pb_utils.PreferredMemory(memory, device_id if gpu else 0)

    def _preprocess(self, request: pb_utils.InferenceRequest) -> torch.Tensor:
        raw = torch.from_dlpack(pb_utils.get_input_tensor_by_name(request, "raw_embeddings").to_dlpack())
        return (raw.to(self.device).to(torch.float32) - CENTRE) / CENTRE

    def _classify(self, features: torch.Tensor) -> pb_utils.InferenceResponse:
        request = pb_utils.InferenceRequest(
            model_name=self.downstream,
            requested_output_names=["np_logits"],
            inputs=[pb_utils.Tensor.from_dlpack("np_script_embeddings", features)],
            preferred_memory=self.preferred_memory,
        )
        reply = request.exec()
        if reply.has_error():
            return _error(f"{self.downstream} answered an error: {reply.error().message()}")
        logits = pb_utils.get_output_tensor_by_name(reply, "np_logits")
        pb_utils.Logger.log_verbose(f"gpu_handoff: reply np_logits on {'host' if logits.is_cpu() else 'GPU'}")
        return pb_utils.InferenceResponse(output_tensors=[logits])

    # Tensors are handed over as torch tensors, not raw DLPack capsules: the backend then synchronises the
    # stream that computed them before anyone reads them.
    def execute(self, requests: list[pb_utils.InferenceRequest]) -> list[pb_utils.InferenceResponse]:
        responses = []
        for request in requests:
            try:
                features = self._preprocess(request)
                if self.downstream:
                    responses.append(self._classify(features))
                else:
                    tensor = pb_utils.Tensor.from_dlpack("np_script_embeddings", features)
                    responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
            except Exception as error:
                responses.append(_error(f"pre-processing failed: {type(error).__name__}: {error}"))
        return responses
