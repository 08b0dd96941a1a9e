"""A pipeline's post-processing as a python model of its own (benchmark anchor; client/pipelines.py): the
pipeline's hooks.py postprocess, in torch, on this instance's device, one request at a time.

- Without parameter `downstream_model` (P_post, the ensemble's second step): the request holds the ONNX
  model's outputs (parameter `onnx_outputs`) and the client inputs the post-processing reads.
- With it (P_bls): the request holds the client's inputs; this model sends them to the ONNX model through
  async BLS, all the requests of an execute at once so that the ONNX model can batch them, asks for the
  answers on its own device, and post-processes them.

Tensors arrive and leave through DLPack, on the device where the ONNX model left them.
"""

import asyncio
import importlib.util
import json
from pathlib import Path

import torch
import triton_python_backend_utils as pb_utils


def error_response(message):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = config["parameters"]
        self.downstream = parameters.get("downstream_model", {}).get("string_value", "")
        self.onnx_outputs = parameters["onnx_outputs"]["string_value"].split(",")
        self.outputs = [output["name"] for output in config["output"]]
        gpu = args["model_instance_kind"] == "GPU"
        device_id = int(args["model_instance_device_id"])
        self.device = torch.device(f"cuda:{device_id}" if gpu else "cpu")
        memory = pb_utils.TRITONSERVER_MEMORY_GPU if gpu else pb_utils.TRITONSERVER_MEMORY_CPU
        self.preferred_memory = pb_utils.PreferredMemory(memory, device_id if gpu else 0)
        path = Path(args["model_repository"]) / args["model_version"] / "hooks.py"
        spec = importlib.util.spec_from_file_location(f"{args['model_name']}_hooks", path)
        self.hooks = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.hooks)

    def _tensors(self, tensors):
        return {t.name(): torch.from_dlpack(t.to_dlpack()).to(self.device) for t in tensors}

    def _answer(self, request, reply):
        if reply is not None and reply.has_error():
            return error_response(f"{self.downstream} answered an error: {reply.error().message()}")
        try:
            inputs = self._tensors(request.inputs())
            if reply is None:  # the ensemble's step: the ONNX model's outputs came with the request
                outputs = {name: inputs.pop(name) for name in self.onnx_outputs}
            else:
                outputs = self._tensors(reply.output_tensors())
            answer = self.hooks.postprocess(outputs, inputs)
            tensors = [pb_utils.Tensor.from_dlpack(n, answer[n].contiguous()) for n in self.outputs]
            return pb_utils.InferenceResponse(output_tensors=tensors)
        except Exception as error:
            return error_response(f"post-processing failed: {type(error).__name__}: {error}")

    async def execute(self, requests):
        replies = [None] * len(requests)
        if self.downstream:
            calls = [
                pb_utils.InferenceRequest(
                    model_name=self.downstream,
                    requested_output_names=self.onnx_outputs,
                    inputs=request.inputs(),
                    preferred_memory=self.preferred_memory,
                ).async_exec()
                for request in requests
            ]
            replies = await asyncio.gather(*calls)
        return [self._answer(request, reply) for request, reply in zip(requests, replies, strict=True)]
