"""The catalogue of malformed requests, as data: each kind built for a given model from its metadata, with
the error code and the message Triton must answer it with. The soak mixes them into its load; the
reliability tests send each one beside good neighbours."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from .reference import random_array
from .releases import ErrorCode
from .transport import TensorMeta, WireTensor


@dataclass(frozen=True)
class Malformed:
    """One malformed request: its tensors, the Triton error code it gets, and what its message says."""

    kind: str
    inputs: tuple[WireTensor, ...]
    says: re.Pattern[str]
    code: ErrorCode = "INVALID_ARG"


def malformed_requests(
    model: str,
    inputs: Sequence[TensorMeta],
    max_batch_size: int,
    seed: int = 0,
    optional: Sequence[str] = (),
) -> list[Malformed]:
    """One request per kind that applies to the model; Triton core refuses each before the model runs.
    `optional`: the names of inputs a request may leave out (`optional: true`), which no request here
    sends: only a missing required input is an error."""
    rng = np.random.default_rng(seed)
    required = [meta for meta in inputs if meta.name not in optional]
    good = [WireTensor(meta.name, random_array(meta, 2, rng), meta.datatype) for meta in required]
    first, others = good[0], good[1:]
    name, quoted = re.escape(first.name), re.escape(f"'{model}'")
    found: list[Malformed] = []

    def add(kind: str, tensors: Sequence[WireTensor], message: str) -> None:
        found.append(Malformed(kind, tuple(tensors), re.compile(message)))

    wrong_type = "FP64" if first.datatype != "FP64" else "FP32"
    wrong = first.array.astype(triton_to_np_dtype(wrong_type))
    add(
        "wrong_dtype",
        [WireTensor(first.name, wrong, wrong_type), *others],
        f"input '{name}' data-type is '{wrong_type}', but model {quoted} expects '{first.datatype}'",
    )
    add(
        "bytes_for_numeric",
        [WireTensor(first.name, np.full(first.array.shape, b"1", dtype=np.object_), "BYTES"), *others],
        f"input '{name}' data-type is 'BYTES', but model {quoted} expects '{first.datatype}'",
    )
    inner = list(first.array.shape)
    if len(inner) > 1 and inputs[0].shape[-1] > 0:
        inner[-1] += 1
        add(
            "wrong_inner_dim",
            [WireTensor(first.name, np.resize(first.array, inner), first.datatype), *others],
            rf"unexpected shape for input '{name}' for model {quoted}\. Expected .*, "
            rf"got \[{', ?'.join(map(str, inner))}\]",
        )
    add(
        "wrong_rank",
        # a trailing axis: the batch axis stays equal to the other inputs' (else that error comes first)
        [WireTensor(first.name, first.array[..., np.newaxis], first.datatype), *others],
        f"unexpected shape for input '{name}' for model {quoted}",
    )
    add(
        "unknown_input",
        [*good, WireTensor("no_such_input", first.array, first.datatype)],
        rf"unexpected inference input 'no_such_input' for model {quoted}"
        rf"|expected {len(good)} inputs but got {len(good) + 1} inputs for model {quoted}",
    )
    if len(required) == len(inputs):
        add("missing_input", others, rf"expected {len(good)} inputs but got {len(good) - 1} inputs")
    else:  # Triton core's words where some inputs are optional (infer_request.cc)
        add(
            "missing_input",
            others,
            rf"expected number of inputs between {len(good)} and {len(inputs)} "
            rf"but got {len(good) - 1} inputs",
        )
    add("duplicate_input", [*good, first], f"input '{name}' already exists in request")
    if max_batch_size > 0:
        too_many = max_batch_size + 1
        add(
            "batch_above_max",
            [
                WireTensor(t.name, np.resize(t.array, (too_many, *t.array.shape[1:])), t.datatype)
                for t in good
            ],
            rf"batch-size must be <= {max_batch_size} for {quoted}",
        )
        if others:
            taller = others[0]
            add(
                "inputs_disagree_on_batch_size",
                [
                    first,
                    WireTensor(taller.name, np.concatenate([taller.array] * 2), taller.datatype),
                    *others[1:],
                ],
                f"input '{re.escape(taller.name)}' batch size does not match other inputs for {quoted}",
            )
    return found
