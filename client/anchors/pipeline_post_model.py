"""A pipeline's post-processing as a python model of its own (benchmark anchor; client/pipelines.py): the
pipeline's hooks.py postprocess, in torch, on this instance's device, once per execute as the hooked
model runs it: the requests' tensors concatenated along the batch axis, post-processed in one call, the
answer split back. So ensemble and BLS differ from the hooked model in their hops, not in batching.

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

    def _tensors_of(self, request, reply):
        """(client inputs, the ONNX model's outputs) of one request, as torch tensors on this device."""
        inputs = self._tensors(request.inputs())
        if reply is None:  # the ensemble's step: the ONNX model's outputs came with the request
            return inputs, {name: inputs.pop(name) for name in self.onnx_outputs}
        return inputs, self._tensors(reply.output_tensors())

    def _post_process(self, gathered):
        """gathered: (client inputs, ONNX outputs) of each request -> each request's output tensors."""
        rows = [outputs[self.onnx_outputs[0]].shape[0] for _, outputs in gathered]
        inputs = {n: torch.cat([i[n] for i, _ in gathered]) for n in gathered[0][0]}
        outputs = {n: torch.cat([o[n] for _, o in gathered]) for n in self.onnx_outputs}
        answer = self.hooks.postprocess(outputs, inputs)
        parts = {n: answer[n].split(rows) for n in self.outputs}
        return [
            [pb_utils.Tensor.from_dlpack(n, parts[n][k].contiguous()) for n in self.outputs]
            for k in range(len(gathered))
        ]

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
        responses = [None] * len(requests)
        gathered, where = [], []
        for index, (request, reply) in enumerate(zip(requests, replies, strict=True)):
            if reply is not None and reply.has_error():
                responses[index] = error_response(
                    f"{self.downstream} answered an error: {reply.error().message()}"
                )
                continue
            try:
                gathered.append(self._tensors_of(request, reply))
                where.append(index)
            except Exception as error:
                responses[index] = error_response(f"bad request: {type(error).__name__}: {error}")
        if gathered:
            try:
                for index, tensors in zip(where, self._post_process(gathered), strict=True):
                    responses[index] = pb_utils.InferenceResponse(output_tensors=tensors)
            except Exception as error:
                for index in where:
                    responses[index] = error_response(
                        f"post-processing failed: {type(error).__name__}: {error}"
                    )
        return responses
