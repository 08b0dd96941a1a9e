"""The python backend's own floor (benchmark anchor only): read the inputs through DLPack, return zeros.

No ONNX Runtime, no computation: what is left is the cost of Triton, the python-backend stub and the client
for this model's inputs and outputs. Parameter `null_output` says where the zeros come from: 'host' (numpy, as
a host output travels), 'device' (a torch CUDA tensor through DLPack, as a GPU output travels), and 'kernel'
(numpy zeros as 'host', after one small kernel on each request's input on the GPU and one synchronize per
execute, as ours synchronises once): the python backend's floor for any model that computes on the GPU in the
stub. `ours - null` for the matching output placement is then what our code adds per request.
"""

import json

import numpy as np
import torch
import torch.utils.dlpack
import triton_python_backend_utils as pb_utils

NP_TYPES = {"TYPE_FP32": np.float32, "TYPE_FP16": np.float16, "TYPE_INT64": np.int64, "TYPE_INT32": np.int32}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = config.get("parameters", {})
        self.mode = parameters.get("null_output", {}).get("string_value", "host")
        if self.mode not in ("host", "device", "kernel"):
            raise ValueError(f"null_output {self.mode!r}: 'host', 'device' or 'kernel'")
        self.outputs = [
            (out["name"], NP_TYPES[out["data_type"]], [int(d) for d in out["dims"]])
            for out in config["output"]
        ]
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}")

    def execute(self, requests):
        inputs = [[torch.from_dlpack(t.to_dlpack()) for t in request.inputs()] for request in requests]
        rows = [tensors[0].shape[0] for tensors in inputs]
        if self.mode == "kernel":  # one small kernel per request on its input (the GPU)
            for tensors in inputs:
                tensors[0][:1].sum()
            if torch.cuda.is_available():
                torch.cuda.current_stream(self.device).synchronize()  # once per execute, as ours does
        responses = []
        for count in rows:
            tensors = []
            for name, dtype, dims in self.outputs:
                if self.mode in ("host", "kernel"):
                    tensors.append(pb_utils.Tensor(name, np.zeros([count, *dims], dtype=dtype)))
                    continue
                torch_dtype = torch.from_numpy(np.empty(0, dtype)).dtype
                zeros = torch.zeros([count, *dims], dtype=torch_dtype, device=self.device)
                torch.cuda.current_stream(self.device).synchronize()
                tensors.append(pb_utils.Tensor.from_dlpack(name, torch.utils.dlpack.to_dlpack(zeros)))
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
