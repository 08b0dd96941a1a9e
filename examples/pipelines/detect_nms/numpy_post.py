"""The same post-processing as hooks.py in numpy: what the tutorial model.py does, and the reference."""

import numpy as np

SCORE_THRESHOLD = 0.5
IOU_THRESHOLD = 0.5
CANDIDATES = 100
MAX_DETECTIONS = 20


def pairwise_iou(boxes):
    x1, y1, x2, y2 = (boxes[..., i] for i in range(4))
    area = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    width = np.minimum(x2[:, :, None], x2[:, None, :]) - np.maximum(x1[:, :, None], x1[:, None, :])
    height = np.minimum(y2[:, :, None], y2[:, None, :]) - np.maximum(y1[:, :, None], y1[:, None, :])
    inter = np.clip(width, 0, None) * np.clip(height, 0, None)
    return inter / np.maximum(area[:, :, None] + area[:, None, :] - inter, 1e-9)


def top(values, k):
    """The k largest of each row, best first, and where they were."""
    order = np.argsort(-values, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(values, order, axis=1), order


def postprocess(outputs, inputs):
    scores = np.where(outputs["anchor_scores"] >= SCORE_THRESHOLD, outputs["anchor_scores"], 0).astype(
        np.float32
    )
    top_scores, order = top(scores, CANDIDATES)
    top_boxes = np.take_along_axis(outputs["anchor_boxes"], order[..., None], axis=1)
    overlap = np.triu(pairwise_iou(top_boxes), k=1)
    suppressed = overlap.max(axis=1) > IOU_THRESHOLD
    kept = np.where(suppressed, 0, top_scores).astype(np.float32)
    final_scores, picked = top(kept, MAX_DETECTIONS)
    final_boxes = np.take_along_axis(top_boxes, picked[..., None], axis=1) * (final_scores > 0)[..., None]
    return {"boxes": final_boxes.astype(np.float32), "scores": final_scores}
