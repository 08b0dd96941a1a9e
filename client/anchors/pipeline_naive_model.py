"""A pipeline as the tutorial model.py writes it (benchmark anchor only; client/pipelines.py): as_numpy()
(GPU inputs copied to the host), the pre-processing in numpy where the pipeline has one, session.run()
(copied to the device and the outputs back), then the post-processing in numpy (numpy_post.py beside this
file: its `preprocess`, where it defines one, and its `postprocess`), one request at a time.
"""

import importlib.util
import json
from pathlib import Path

import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        version = Path(args["model_repository"]) / args["model_version"]
        providers = ["CPUExecutionProvider"]
        if args["model_instance_kind"] == "GPU":
            device = {"device_id": int(args["model_instance_device_id"])}
            providers = [("CUDAExecutionProvider", device), "CPUExecutionProvider"]
        self.session = ort.InferenceSession(str(version / "model.onnx"), providers=providers)
        # a GPU instance that got no CUDA provider would be timed on the CPU: say so instead
        if (
            args["model_instance_kind"] == "GPU"
            and "CUDAExecutionProvider" not in self.session.get_providers()
        ):
            raise RuntimeError(f"CUDA execution provider not loaded: {self.session.get_providers()}")
        self.session_inputs = [i.name for i in self.session.get_inputs()]
        self.onnx_outputs = config["parameters"]["onnx_outputs"]["string_value"].split(",")
        self.outputs = [output["name"] for output in config["output"]]
        spec = importlib.util.spec_from_file_location("numpy_post", version / "numpy_post.py")
        self.post = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.post)
        self.preprocess = getattr(self.post, "preprocess", None)

    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = {tensor.name(): tensor.as_numpy() for tensor in request.inputs()}
            model_inputs = inputs if self.preprocess is None else self.preprocess(inputs)
            raw = self.session.run(self.onnx_outputs, {n: model_inputs[n] for n in self.session_inputs})
            answer = self.post.postprocess(dict(zip(self.onnx_outputs, raw, strict=True)), inputs)
            tensors = [pb_utils.Tensor(n, answer[n]) for n in self.outputs]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
