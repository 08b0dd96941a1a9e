"""The same post-processing as hooks.py in numpy: what the tutorial model.py does, and the reference."""

import numpy as np


def postprocess(outputs, inputs):
    states = outputs["last_hidden_state"]
    mask = inputs["attention_mask"].astype(states.dtype)[..., None]
    pooled = (states * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1.0)
    norm = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return {"embedding": (pooled / norm).astype(np.float32)}
