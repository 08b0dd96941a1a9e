"""The naive python-backend model our users start from (benchmark anchor only; never ship this).

as_numpy() copies GPU inputs to the host, session.run() copies them back to the device and the outputs to
the host again, and the response travels as numpy: the GPU->CPU->GPU round trips this project removes.
"""

import json
from pathlib import Path

import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        providers = ["CPUExecutionProvider"]
        if args["model_instance_kind"] == "GPU":
            device = {"device_id": int(args["model_instance_device_id"])}
            providers = [("CUDAExecutionProvider", device), "CPUExecutionProvider"]
        self.session = ort.InferenceSession(str(path), providers=providers)
        # a GPU instance that got no CUDA provider would be timed on the CPU: say so instead
        if (
            args["model_instance_kind"] == "GPU"
            and "CUDAExecutionProvider" not in self.session.get_providers()
        ):
            raise RuntimeError(f"CUDA execution provider not loaded: {self.session.get_providers()}")
        self.output_names = [output["name"] for output in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            feeds = {tensor.name(): tensor.as_numpy() for tensor in request.inputs()}
            outputs = self.session.run(self.output_names, feeds)
            tensors = [pb_utils.Tensor(n, o) for n, o in zip(self.output_names, outputs, strict=True)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
