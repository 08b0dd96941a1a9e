"""A pipeline's hooks as a python model of its own (benchmark anchor; client/pipelines.py): the pipeline's
hooks.py preprocess or postprocess, in torch, on this instance's device, as the hooked model runs them:
requests whose tensors agree on all but the batch axis concatenated, run through the hook in one call, the
answer split back. So ensemble and BLS differ from the hooked model in their hops, not in batching.

- Parameter `step` "pre" (P_pre, the ensemble's first step where the pipeline has a preprocess): the
  request holds the client's inputs; the answer is the ONNX model's inputs (this model's outputs). Requests
  of different shapes (images of different sizes, allow_ragged_batch) are preprocessed one shape at a time.
- Otherwise, without parameter `downstream_model` (P_post, the ensemble's last step): the request holds
  the ONNX model's outputs (parameter `onnx_outputs`) and the client inputs the post-processing reads.
- With it (P_bls): the request holds the client's inputs; this model preprocesses them where hooks.py has
  a preprocess (as P_pre does), sends them to the ONNX model through async BLS, all the requests of an
  execute at once so that the ONNX model can batch them, asks for the answers on its own device, and
  post-processes them. Parameter `post_reads` (comma-separated, may be empty) names the client inputs
  postprocess reads: only those are concatenated for it, as the ensemble maps only those to its step.

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


def _rows(tensors):
    return next(iter(tensors.values())).shape[0]


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.step = parameters.get("step", "post")
        self.downstream = parameters.get("downstream_model", "")
        self.onnx_outputs = [n for n in parameters.get("onnx_outputs", "").split(",") if n]
        post_reads = parameters.get("post_reads")
        self.post_reads = None if post_reads is None else [n for n in post_reads.split(",") if n]
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
        self.preprocess = getattr(self.hooks, "preprocess", None)

    def _tensors(self, tensors):
        return {t.name(): torch.from_dlpack(t.to_dlpack()).to(self.device) for t in tensors}

    def _preprocessed(self, inputs, responses):
        """Each request's client inputs (None: already answered) -> its model inputs, by index: the
        requests of one shape concatenated, preprocessed in one call, split back. A group whose
        preprocess fails answers its requests with the error."""
        groups = {}
        for index, tensors in enumerate(inputs):
            if tensors is not None:
                key = tuple((n, t.dtype, tuple(t.shape[1:])) for n, t in sorted(tensors.items()))
                groups.setdefault(key, []).append(index)
        done = {}
        for members in groups.values():
            try:
                if len(members) == 1:
                    done[members[0]] = self.preprocess(inputs[members[0]])
                    continue
                joint = {n: torch.cat([inputs[i][n] for i in members]) for n in inputs[members[0]]}
                parts = {
                    n: t.split([_rows(inputs[i]) for i in members]) for n, t in self.preprocess(joint).items()
                }
                for k, index in enumerate(members):
                    done[index] = {n: split[k] for n, split in parts.items()}
            except Exception as error:
                for index in members:
                    responses[index] = error_response(f"preprocess failed: {type(error).__name__}: {error}")
        return done

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

    def _downstream(self, request, model_inputs):
        """The BLS request for the ONNX model: the preprocessed tensors, or the client's as they came."""
        if model_inputs is None:
            inputs = request.inputs()
        else:  # torch tensors themselves, so that the python backend syncs the stream that made them
            inputs = [pb_utils.Tensor.from_dlpack(n, t.contiguous()) for n, t in model_inputs.items()]
        return pb_utils.InferenceRequest(
            model_name=self.downstream,
            requested_output_names=self.onnx_outputs,
            inputs=inputs,
            preferred_memory=self.preferred_memory,
        ).async_exec()

    async def execute(self, requests):
        responses = [None] * len(requests)
        inputs = [None] * len(requests)  # each request's tensors, on this device
        for index, request in enumerate(requests):
            try:
                inputs[index] = self._tensors(request.inputs())
            except Exception as error:
                responses[index] = error_response(f"bad request: {type(error).__name__}: {error}")
        if self.step == "pre":
            for index, model_inputs in self._preprocessed(inputs, responses).items():
                tensors = [pb_utils.Tensor.from_dlpack(n, model_inputs[n].contiguous()) for n in self.outputs]
                responses[index] = pb_utils.InferenceResponse(output_tensors=tensors)
            return responses
        replies = [None] * len(requests)
        if self.downstream:
            model_inputs = {}
            if self.preprocess is not None:
                model_inputs = self._preprocessed(inputs, responses)
            sent = [i for i in range(len(requests)) if responses[i] is None]
            answers = await asyncio.gather(
                *(self._downstream(requests[i], model_inputs.get(i)) for i in sent)
            )
            for index, reply in zip(sent, answers, strict=True):
                replies[index] = reply
        gathered, where = [], []
        for index, (tensors, reply) in enumerate(zip(inputs, replies, strict=True)):
            if responses[index] is not None:
                continue
            if reply is not None and reply.has_error():
                responses[index] = error_response(
                    f"{self.downstream} answered an error: {reply.error().message()}"
                )
                continue
            try:
                if reply is None:  # the ensemble's step: the ONNX model's outputs came with the request
                    outputs = {name: tensors.pop(name) for name in self.onnx_outputs}
                else:
                    outputs = self._tensors(reply.output_tensors())
                if self.post_reads is not None:
                    tensors = {name: tensors[name] for name in self.post_reads}
                gathered.append((tensors, outputs))
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
