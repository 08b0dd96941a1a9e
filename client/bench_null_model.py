"""The python backend's own floor (benchmark anchor only): read the inputs through DLPack, return zeros.

No ONNX Runtime, no computation: what is left is the cost of Triton, the python-backend stub and the client
for this model's inputs and outputs. Parameter `null_output` says where the zeros come from: 'host' (numpy, as
a host output travels), 'device' (a torch CUDA tensor through DLPack, as a GPU output travels), and, to tell
apart what a host output's form costs Triton: 'hostdl' (a torch CPU tensor through DLPack) and 'pinned' (a
pinned torch CPU tensor through DLPack). 'kernel' returns numpy zeros as 'host' does, after one small kernel
on each request's input on the GPU and one synchronize per execute (as ours synchronises once): the python
backend's floor for any model that computes on the GPU in the stub; 'kernel_local' the same with the kernel on
a tensor of the stub's own, not on the input (which the stub maps from the client's CUDA-shm region for each
request). `ours - null` for the matching output placement is then what our code adds per request.

Between 'kernel' and ours, three steps of what ours does on the GPU, each adding to the one before (to tell
which of them costs under load, client.ab): 'kernel_stream' runs the kernel on a stream of the instance's own
(ours runs everything on one); 'cat' also concatenates the requests' inputs on it into one tensor and runs the
kernel once on that (as gathering does); 'cat_pinned' also copies the joint answer from the device into pinned
host memory and hands out numpy views of its rows (as ours answers host outputs). 'cat_pinned_ort' is
'cat_pinned' in a stub that also holds ours' ONNX Runtime session of the model (the library's runner, CUDA
graphs per bucket on the same stream, each bucket's graph captured at load) and never runs it: what the
session's presence alone costs the stub around execute().
"""

import contextlib
import json
from pathlib import Path

import numpy as np
import torch
import torch.utils.dlpack
import triton_python_backend_utils as pb_utils

# The modes that compute on the GPU (and synchronise once per execute), those that answer numpy zeros, those
# on a stream of the instance's own, those that concatenate the batch and those that answer pinned views.
GPU_MODES = ("kernel", "kernel_local", "kernel_stream", "cat", "cat_pinned", "cat_pinned_ort")
NUMPY_ZEROS_MODES = ("host", "kernel", "kernel_local", "kernel_stream", "cat")
STREAM_MODES = ("kernel_stream", "cat", "cat_pinned", "cat_pinned_ort")
CAT_MODES = ("cat", "cat_pinned", "cat_pinned_ort")
PINNED_MODES = ("cat_pinned", "cat_pinned_ort")
NP_TYPES = {"TYPE_FP32": np.float32, "TYPE_FP16": np.float16, "TYPE_INT64": np.int64, "TYPE_INT32": np.int32}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = config.get("parameters", {})
        self.mode = parameters.get("null_output", {}).get("string_value", "host")
        self.outputs = [
            (out["name"], NP_TYPES[out["data_type"]], [int(d) for d in out["dims"]])
            for out in config["output"]
        ]
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}")
        self.scratch = torch.zeros(8, device=self.device) if self.mode == "kernel_local" else None
        # The steps between 'kernel' and ours run on a stream of the instance's own, as ours does.
        self.stream = torch.cuda.Stream(self.device) if self.mode in STREAM_MODES else None
        rows = int(config.get("max_batch_size", 0)) or 1
        self.answers = (  # the joint answer's device memory and its pinned host copy, allocated once
            [
                (torch.zeros([rows, *dims], device=self.device), torch.zeros([rows, *dims], pin_memory=True))
                for _, _, dims in self.outputs
            ]
            if self.mode in PINNED_MODES
            else None
        )
        if self.mode == "cat_pinned_ort":
            onnx_path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
            self.unused_session = _captured_runner(onnx_path, self.device, self.stream, rows)

    def execute(self, requests):
        inputs = [[torch.from_dlpack(t.to_dlpack()) for t in request.inputs()] for request in requests]
        rows = [tensors[0].shape[0] for tensors in inputs]
        on_stream = torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()
        with on_stream:
            if self.mode in (
                "kernel",
                "kernel_stream",
            ):  # one small kernel per request on its input (the GPU)
                for tensors in inputs:
                    tensors[0][:1].sum()
            elif self.mode in CAT_MODES:  # once, on the requests' inputs joined (as gathering does)
                torch.cat([tensors[0] for tensors in inputs])[:1].sum()
            elif self.scratch is not None:
                self.scratch.add_(1)  # one kernel on the stub's own memory
            answers = self._pinned_answers(rows) if self.answers is not None else None
            if self.mode in GPU_MODES and torch.cuda.is_available():
                torch.cuda.current_stream(self.device).synchronize()  # once per execute, as ours does
        responses = []
        for index, count in enumerate(rows):
            tensors = []
            for position, (name, dtype, dims) in enumerate(self.outputs):
                if answers is not None:
                    tensors.append(pb_utils.Tensor(name, answers[position][index].numpy()))
                    continue
                if self.mode in NUMPY_ZEROS_MODES:
                    tensors.append(pb_utils.Tensor(name, np.zeros([count, *dims], dtype=dtype)))
                    continue
                torch_dtype = torch.from_numpy(np.empty(0, dtype)).dtype
                if self.mode == "device":
                    zeros = torch.zeros([count, *dims], dtype=torch_dtype, device=self.device)
                    torch.cuda.current_stream(self.device).synchronize()
                else:
                    pinned = self.mode == "pinned" and torch.cuda.is_available()
                    zeros = torch.zeros([count, *dims], dtype=torch_dtype, pin_memory=pinned)
                tensors.append(pb_utils.Tensor.from_dlpack(name, torch.utils.dlpack.to_dlpack(zeros)))
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

    def _pinned_answers(self, rows):
        """'cat_pinned': each output's joint answer copied into pinned memory, split by request."""
        total = sum(rows)
        pieces = []
        for device, host in self.answers:
            host[:total].copy_(device[:total], non_blocking=True)
            pieces.append(torch.split(host[:total], rows))
        return pieces


def _captured_runner(onnx_path, device, stream, max_rows):
    """'cat_pinned_ort': ours' runner of the model as the demo ships it (CUDA graphs per bucket, on the
    instance's stream), each bucket's graph captured now; the model never runs it afterwards."""
    from triton_ort import IOBindingRunner, ModelOptions, Placement, create_session

    where = Placement("cuda", device.index or 0, stream.cuda_stream)
    runner = IOBindingRunner(
        create_session(onnx_path, ModelOptions(cuda_graph=True), where), where, cuda_graph=True
    )
    runner.pad_graph_batches(max_rows)
    spec = runner.inputs[0]
    inner = [int(d) for d in spec.shape[1:]]
    with torch.cuda.stream(stream):
        bucket = 1
        while bucket <= max_rows:
            for _ in range(2):  # the first run of a shape warms up, the second captures
                runner.reclaim_outputs()
                runner.run({spec.name: torch.zeros(bucket, *inner, device=device)})
            bucket *= 2
    stream.synchronize()
    return runner
