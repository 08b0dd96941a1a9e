"""Image classification: a CNN's logits -> the TOP_K most likely classes and their probabilities.

postprocess: softmax over the classes, then top-k, best first, on the whole gathered batch, on the
instance's device. The client sends normalised float images (N, 3, 64, 64).
"""

from __future__ import annotations

import torch

from triton_ort import Tensors

SIDE = 64
TOP_K = 5

INPUTS = {"images": ("FP32", [-1, 3, SIDE, SIDE])}
OUTPUTS = {"top_scores": ("FP32", [-1, TOP_K]), "top_classes": ("INT64", [-1, TOP_K])}


def postprocess(outputs: Tensors, inputs: Tensors) -> Tensors:
    probabilities = torch.softmax(outputs["logits"], dim=1)
    scores, classes = torch.topk(probabilities, TOP_K, dim=1)
    return {"top_scores": scores, "top_classes": classes}
