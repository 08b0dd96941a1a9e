"""Hooks of `demo_hooks`: the demo classifier for clients that send raw bytes and want ranked classes.

preprocess: uint8 features (0..255, as a camera or a quantised feature store gives them) -> the float32
features in -1..1 that the ONNX model was trained on. postprocess: logits -> softmax probabilities, the
TOP_K most likely classes with their probabilities, best first. Both run on the instance's device and
stream, on the whole gathered batch (docs/hooks.md). INPUTS and OUTPUTS are what clients send and receive:
auto-complete fills config.pbtxt from them (the batch axis is the open first one).
"""

from __future__ import annotations

import torch

from triton_ort import Tensors

CENTRE = 127.5  # uint8 0..255 -> -1..1
TOP_K = 2

INPUTS = {"raw_embeddings": ("UINT8", [-1, 2010])}
OUTPUTS = {"top_scores": ("FP32", [-1, TOP_K]), "top_classes": ("INT64", [-1, TOP_K])}


def preprocess(inputs: Tensors) -> Tensors:
    raw = inputs["raw_embeddings"]
    return {"np_script_embeddings": (raw.to(torch.float32) - CENTRE) / CENTRE}


def postprocess(outputs: Tensors, inputs: Tensors) -> Tensors:
    probabilities = torch.softmax(outputs["np_logits"], dim=1)
    scores, classes = torch.topk(probabilities, TOP_K, dim=1)
    return {"top_scores": scores, "top_classes": classes}
