"""A stand-in for the python backend's request, tensor and response classes (triton_python_backend_utils),
for narrow unit tests of the adapter (backend/model.py) without a stub."""

from __future__ import annotations

from typing import Any

import numpy as np

FINAL = 1


class Tensor:
    def __init__(self, name: str, array: Any) -> None:
        if isinstance(array, np.ndarray) and array.dtype == np.float16:
            raise ValueError("this stand-in refuses float16")  # as pb_utils refuses what it cannot carry
        self.name_, self.array = name, array

    def name(self) -> str:
        return self.name_

    def is_cpu(self) -> bool:
        return True

    def as_numpy(self) -> Any:
        if isinstance(self.array, Exception):
            raise self.array
        return self.array


class TritonError:
    INVALID_ARG, INTERNAL, UNAVAILABLE, CANCELLED = "INVALID_ARG", "INTERNAL", "UNAVAILABLE", "CANCELLED"

    def __init__(self, message: str, code: str) -> None:
        self.message, self.code = message, code


class InferenceResponse:
    def __init__(self, output_tensors: list[Any], error: Any = None) -> None:
        self.output_tensors, self.error = output_tensors, error


class Sender:
    def __init__(self) -> None:
        self.sent: list[tuple[InferenceResponse, int]] = []

    def send(self, response: InferenceResponse, flags: int) -> None:
        self.sent.append((response, flags))


class Request:
    def __init__(self, **inputs: Any) -> None:
        self._inputs = [Tensor(name, value) for name, value in inputs.items()]
        self.sender = Sender()

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def get_response_sender(self) -> Sender:
        return self.sender

    def is_cancelled(self) -> bool:
        return False
