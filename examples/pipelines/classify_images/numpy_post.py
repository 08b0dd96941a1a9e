"""The same pre- and post-processing as hooks.py in numpy: what the tutorial model.py does, and the
reference. The resize is torch's bilinear one (align_corners=False, no antialiasing) written out: for an
output pixel d, the source coordinate is (d + 0.5) * in / out - 0.5, clamped at 0, between the two pixels
around it (the second clamped at the edge)."""

import numpy as np

SIDE = 64
TOP_K = 5
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(1, 3, 1, 1)


def _taps(size_in, size_out):
    """Each output position's two source positions and the second one's weight."""
    source = (np.arange(size_out, dtype=np.float32) + 0.5) * np.float32(size_in / size_out) - 0.5
    source = np.maximum(source, 0.0)
    low = np.minimum(source.astype(np.int64), size_in - 1)
    high = np.minimum(low + 1, size_in - 1)
    return low, high, (source - low).astype(np.float32)


def resize(images, height, width):
    """(N, C, H, W) float32 -> (N, C, height, width), bilinear, as torch's interpolate."""
    low, high, weight = _taps(images.shape[2], height)
    rows = images[:, :, low, :] * (1 - weight)[:, None] + images[:, :, high, :] * weight[:, None]
    low, high, weight = _taps(images.shape[3], width)
    return rows[..., low] * (1 - weight) + rows[..., high] * weight


def preprocess(inputs):
    images = inputs["pixels"].transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)
    images = resize(images, SIDE, SIDE)
    return {"images": np.ascontiguousarray((images - MEAN) / STD, dtype=np.float32)}


def postprocess(outputs, inputs):
    logits = outputs["logits"]
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = exp / exp.sum(axis=1, keepdims=True)
    classes = np.argsort(-probabilities, axis=1, kind="stable")[:, :TOP_K]
    scores = np.take_along_axis(probabilities, classes, axis=1)
    return {"top_scores": scores.astype(np.float32), "top_classes": classes.astype(np.int64)}
