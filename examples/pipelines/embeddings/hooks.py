"""Sentence embeddings: a transformer encoder's token states -> one unit-length vector per sentence.

postprocess: mean of the token states over the tokens the attention mask keeps (padding left out), then
L2 normalisation, on the whole gathered batch, on the instance's device. The client sends token ids and
the attention mask (its tokenizer's output) and receives the embeddings.
"""

from __future__ import annotations

import torch

from triton_ort import Tensors

SEQUENCE = 64
WIDTH = 256

INPUTS = {"input_ids": ("INT64", [-1, SEQUENCE]), "attention_mask": ("INT64", [-1, SEQUENCE])}
OUTPUTS = {"embedding": ("FP32", [-1, WIDTH])}


def postprocess(outputs: Tensors, inputs: Tensors) -> Tensors:
    states = outputs["last_hidden_state"]
    mask = inputs["attention_mask"].to(states.dtype).unsqueeze(-1)
    pooled = (states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    return {"embedding": torch.nn.functional.normalize(pooled, p=2.0, dim=1)}
