"""What the hook tests share: the example's ops written again in numpy around in-process ORT (the answer
to check against), and a model repository with the hook examples for a real tritonserver."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tests.support.paths import MODEL_REPOSITORY, demo_onnx
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.repository import pin_one_instance, read_config, write_config

EXAMPLE = MODEL_REPOSITORY / "demo_hooks"
HANDOFF_REPOSITORY = MODEL_REPOSITORY.parent / "examples" / "gpu_handoff"
GATHER_DELAY_US = 200_000


def example_config() -> dict[str, Any]:
    """demo_hooks' config.pbtxt as Triton hands it to model.py (JSON of ModelConfig), completed from what
    its hooks module declares, as auto-complete completes it, and pointed at the built demo ONNX file."""
    from google.protobuf import json_format

    from triton_ort.cli.config import completed_config

    completed, _ = completed_config(EXAMPLE)
    config: dict[str, Any] = json_format.MessageToDict(completed, preserving_proto_field_name=True)
    config["parameters"]["onnx_file"] = {"string_value": str(demo_onnx())}
    return config


# A test variant of the example's hooks: a value of 255 makes preprocess raise (a hook bug: INTERNAL), 254
# makes it reject the request (InputError: INVALID_ARG); otherwise the example's ops.
STRICT_HOOKS = """
import torch
from triton_ort import InputError

INPUTS = {"raw_embeddings": ("UINT8", [-1, 2010])}
OUTPUTS = {"top_scores": ("FP32", [-1, 2]), "top_classes": ("INT64", [-1, 2])}

def preprocess(inputs):
    raw = inputs["raw_embeddings"]
    if bool((raw == 255).any()):
        raise ValueError("a value of 255 is not allowed")
    if bool((raw == 254).any()):
        raise InputError("254 is reserved")
    return {"np_script_embeddings": (raw.to(torch.float32) - 127.5) / 127.5}

def postprocess(outputs, inputs):
    scores, classes = torch.topk(torch.softmax(outputs["np_logits"], dim=1), 2, dim=1)
    return {"top_scores": scores, "top_classes": classes}
"""


# The short config of a hooked model: what clients see comes from the hooks module's declarations.
SHORT_CONFIG = (
    'backend: "onnxruntime_zerocopy"\n'
    "max_batch_size: 8\n"
    'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value { string_value: "no" } }\n'
    'parameters { key: "hooks" value { string_value: "hooks.py" } }\n'
)

# The demo's classifier for clients that send uint8 features and, when they like, a softmax temperature.
DECLARED_HOOKS = """
import torch
from triton_ort import ClientTensor

INPUTS = {
    "raw": ("UINT8", [-1, 2010]),
    "temperature": ClientTensor("FP32", [-1, 1], optional=True),
}
OUTPUTS = {"probabilities": ("FP32", [-1, 2])}
SEEN = []

def preprocess(inputs):
    SEEN.append(sorted(inputs))
    return {"np_script_embeddings": (inputs["raw"].to(torch.float32) - 127.5) / 127.5}

def postprocess(outputs, inputs):
    logits = outputs["np_logits"]
    if "temperature" in inputs:
        logits = logits / inputs["temperature"]
    return {"probabilities": torch.softmax(logits, dim=1)}
"""

UNDECLARED_HOOKS = """
def preprocess(inputs):
    return {"np_script_embeddings": inputs["raw"].float()}
"""


def expected_logits(raw: NDArray[Any]) -> NDArray[Any]:
    """The demo ONNX in-process on the normalised features: what the hand-off example answers."""
    features = (raw.astype(np.float32) - 127.5) / 127.5
    return np.asarray(reference_outputs(demo_onnx(), {"np_script_embeddings": features})["np_logits"])


def expected_top_k(raw: NDArray[Any], top_k: int = 2) -> dict[str, NDArray[Any]]:
    """demo_hooks' answer: normalise, run the demo ONNX in-process, softmax, top-k (best first)."""
    logits = expected_logits(raw)
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = exp / exp.sum(axis=1, keepdims=True)
    classes = np.argsort(-probabilities, axis=1, kind="stable")[:, :top_k]
    return {"top_scores": np.take_along_axis(probabilities, classes, 1), "top_classes": classes}


def raw_features(rows: int, seed: int) -> NDArray[Any]:
    """uint8 features below 250 (the strict hooks treat 254 and 255 specially)."""
    return np.random.default_rng(seed).integers(0, 250, (rows, 2010), dtype=np.uint8)


def build_hooks_repository(repository: Path) -> Path:
    """demo (one instance), demo_hooks as shipped, hooks_strict: demo_hooks with STRICT_HOOKS and a long
    queue delay, so that concurrent requests reach one execute() together, hooks_broken, whose hooks
    module fails to import, and with the short config, hooks_declared (DECLARED_HOOKS) and
    hooks_undeclared (UNDECLARED_HOOKS)."""
    demo_onnx()
    shutil.copytree(MODEL_REPOSITORY / "demo", repository / "demo")
    pin_one_instance(repository / "demo")
    shutil.copytree(EXAMPLE, repository / "demo_hooks")
    strict = repository / "hooks_strict"
    shutil.copytree(EXAMPLE, strict)
    (strict / "1" / "hooks.py").write_text(STRICT_HOOKS)
    config = read_config(strict)
    config.name = "hooks_strict"
    config.dynamic_batching.max_queue_delay_microseconds = GATHER_DELAY_US
    write_config(strict, config)
    broken = repository / "hooks_broken"  # loaded on demand: its hooks module cannot be imported
    shutil.copytree(EXAMPLE, broken)
    (broken / "1" / "hooks.py").write_text("import a_module_that_is_not_installed\n")
    config = read_config(broken)
    config.name = "hooks_broken"
    write_config(broken, config)
    for name, source in (("hooks_declared", DECLARED_HOOKS), ("hooks_undeclared", UNDECLARED_HOOKS)):
        # the short config: the declared one loads at start, the undeclared one on demand (it is refused)
        (repository / name / "1").mkdir(parents=True)
        shutil.copy(demo_onnx(), repository / name / "1" / "model.onnx")
        (repository / name / "1" / "hooks.py").write_text(source)
        (repository / name / "config.pbtxt").write_text(SHORT_CONFIG)
    return repository
