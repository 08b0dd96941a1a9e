"""The simplest zero-copy model.py a user would write (benchmark anchor only; never ship this).

DLPack in, ONNX Runtime IO binding by pointer, a new binding and output tensor per request on torch's default
stream, ORT's own synchronisation at the end of each run, `.cpu().numpy()` out: about thirty lines, without
our library's plans, gathering, checks or metrics. Every RunOptions names `gpu_graph_id` (ORT >= 1.31
otherwise pays a caught exception per run; docs/benchmarks.md), so what is compared is the design, not that
one trap.
"""

import json
from pathlib import Path

import onnxruntime as ort
import torch
import torch.utils.dlpack
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        device_id = int(args["model_instance_device_id"])
        torch.cuda.set_device(device_id)
        self.device = torch.device("cuda", device_id)
        self.stream = torch.cuda.default_stream(self.device)
        cuda = {
            "device_id": str(device_id),
            "do_copy_in_default_stream": "1",
            "user_compute_stream": str(self.stream.cuda_stream),
        }
        path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        self.session = ort.InferenceSession(
            str(path), providers=[("CUDAExecutionProvider", cuda), "CPUExecutionProvider"]
        )
        self.run_options = ort.RunOptions()
        self.run_options.add_run_config_entry("gpu_graph_id", "-1")
        self.input_name = self.session.get_inputs()[0].name
        self.output_name = self.session.get_outputs()[0].name
        self.output_width = int(config["output"][0]["dims"][0])

    def execute(self, requests):
        responses = []
        with torch.cuda.stream(self.stream):
            for request in requests:
                x = torch.utils.dlpack.from_dlpack(request.inputs()[0].to_dlpack()).contiguous()
                out = torch.empty((x.shape[0], self.output_width), dtype=torch.float32, device=self.device)
                binding = self.session.io_binding()
                binding.bind_input(self.input_name, "cuda", self.device.index, 1, list(x.shape), x.data_ptr())
                binding.bind_output(
                    self.output_name, "cuda", self.device.index, 1, list(out.shape), out.data_ptr()
                )
                self.session.run_with_iobinding(binding, self.run_options)
                host = out.cpu()  # waits for the stream (and so for ORT's kernels) itself
                tensor = pb_utils.Tensor(self.output_name, host.numpy())
                responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return responses
