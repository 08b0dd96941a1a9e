"""Image classification as vision services receive it: decoded uint8 images, one size per request, sizes
varying between requests -> resized and normalised in torch on the instance's device -> the CNN -> the
TOP_K most likely classes and their probabilities.

preprocess: (N, H, W, 3) uint8, HWC as a decoder leaves an image -> float in 0..1, NCHW, bilinear resize
to the classifier's SIDE x SIDE (align_corners=False, no antialiasing: what torchvision's Resize does on a
tensor without antialias), per-channel mean/std normalisation (ImageNet's) -> the ONNX input `images`.
Requests of one size are gathered and resized together; requests of different sizes run through the
hooks one size at a time (docs/hooks.md, "Where they run").
postprocess: softmax over the classes, then top-k, best first (classify_topk's, copied: a hooks module is
copied into its model's version folder alone, so it cannot import its neighbour).
"""

from __future__ import annotations

import torch

from triton_ort import Tensors

SIDE = 64
TOP_K = 5
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

INPUTS = {"pixels": ("UINT8", [-1, -1, -1, 3])}
OUTPUTS = {"top_scores": ("FP32", [-1, TOP_K]), "top_classes": ("INT64", [-1, TOP_K])}

_constants: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
"""MEAN and STD as (1, 3, 1, 1) tensors on each device: made once, not copied to the device per call."""


def _mean_std(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if device not in _constants:
        shape = (1, 3, 1, 1)
        _constants[device] = (
            torch.tensor(MEAN, device=device).reshape(shape),
            torch.tensor(STD, device=device).reshape(shape),
        )
    return _constants[device]


def preprocess(inputs: Tensors) -> Tensors:
    images = inputs["pixels"].permute(0, 3, 1, 2).float() / 255.0
    images = torch.nn.functional.interpolate(
        images, size=(SIDE, SIDE), mode="bilinear", align_corners=False, antialias=False
    )
    mean, std = _mean_std(images.device)
    return {"images": ((images - mean) / std).contiguous()}


def postprocess(outputs: Tensors, inputs: Tensors) -> Tensors:
    probabilities = torch.softmax(outputs["logits"], dim=1)
    scores, classes = torch.topk(probabilities, TOP_K, dim=1)
    return {"top_scores": scores, "top_classes": classes}
