"""Detection: a detector head's boxes and scores -> at most MAX_DETECTIONS boxes per image, overlaps removed.

postprocess: scores under SCORE_THRESHOLD dropped; of the CANDIDATES best boxes, a box is suppressed when
a better-scored one overlaps it by more than IOU_THRESHOLD (Fast NMS, as YOLACT's: one IoU matrix per
image, no loop, so the whole gathered batch runs at once on the instance's device); the best
MAX_DETECTIONS kept, best first. Unused rows are zeros (score 0). Boxes are (x1, y1, x2, y2).
"""

from __future__ import annotations

import torch

from triton_ort import Tensors

CHANNELS, GRID = 64, 16  # the head's input feature map: (N, 64, 16, 16), 256 anchors an image
SCORE_THRESHOLD = 0.5
IOU_THRESHOLD = 0.5
CANDIDATES = 100
MAX_DETECTIONS = 20

INPUTS = {"features": ("FP32", [-1, CHANNELS, GRID, GRID])}
OUTPUTS = {"boxes": ("FP32", [-1, MAX_DETECTIONS, 4]), "scores": ("FP32", [-1, MAX_DETECTIONS])}


def pairwise_iou(boxes: torch.Tensor) -> torch.Tensor:
    """(N, M, 4) -> (N, M, M): the intersection over union of every pair of an image's boxes."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    area = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
    width = torch.minimum(x2[:, :, None], x2[:, None, :]) - torch.maximum(x1[:, :, None], x1[:, None, :])
    height = torch.minimum(y2[:, :, None], y2[:, None, :]) - torch.maximum(y1[:, :, None], y1[:, None, :])
    inter = width.clamp(min=0) * height.clamp(min=0)
    return inter / (area[:, :, None] + area[:, None, :] - inter).clamp(min=1e-9)


def postprocess(outputs: Tensors, inputs: Tensors) -> Tensors:
    scores = outputs["anchor_scores"]
    scores = torch.where(scores >= SCORE_THRESHOLD, scores, torch.zeros_like(scores))
    top_scores, order = scores.topk(CANDIDATES, dim=1)  # best first
    top_boxes = outputs["anchor_boxes"].gather(1, order.unsqueeze(-1).expand(-1, -1, 4))
    # overlap[i, j] for a better box i (i < j) only: box j goes if any better box overlaps it too much
    overlap = pairwise_iou(top_boxes).triu(diagonal=1)
    suppressed = overlap.amax(dim=1) > IOU_THRESHOLD
    kept = torch.where(suppressed, torch.zeros_like(top_scores), top_scores)
    final_scores, picked = kept.topk(MAX_DETECTIONS, dim=1)
    final_boxes = top_boxes.gather(1, picked.unsqueeze(-1).expand(-1, -1, 4))
    final_boxes = final_boxes * (final_scores > 0).unsqueeze(-1).to(final_boxes.dtype)
    return {"boxes": final_boxes, "scores": final_scores}
