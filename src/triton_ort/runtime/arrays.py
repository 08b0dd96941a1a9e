"""The arrays a runner binds: torch tensors on any device, or numpy arrays on the host.

A GPU instance, and an instance with hooks (they take and return torch tensors), runs on torch: Triton's
tensors come through DLPack, and the device's memory is torch's. A CPU instance without hooks runs on numpy
(Triton's `as_numpy()` views, numpy output buffers), so its stub never imports torch, which is most of a
CPU stub's memory (about 190 MiB of it; docs/benchmarks.md, "Memory"). Both kinds bind by pointer, so the
runner (runner.py) reads the same on either: it asks its `Arrays` for buffers, staged inputs, pointers and
concatenations, and nothing else.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import ProviderError
from ..model.dtypes import ElementType
from .session import Placement
from .stats import RunnerStats

if TYPE_CHECKING:
    import torch


class Arrays(Protocol):
    """What a runner needs of an array library, on the device its session computes on."""

    device: Any
    """torch.device for torch; "cpu" for numpy."""
    stats: RunnerStats
    """The runner's counters (copies made in staging)."""

    def empty(self, shape: Sequence[int], element_type: ElementType) -> Any: ...

    def zeros(self, shape: Sequence[int], element_type: ElementType) -> Any: ...

    def to_device(self, array: Any) -> Any:
        """The array C-contiguous on the runner's device: itself where it already is (no copy)."""
        ...

    def concatenate(self, arrays: Sequence[Any], into: Any | None) -> Any:
        """Along axis 0, into `into` where given."""
        ...

    def pointer(self, array: Any) -> int: ...

    def from_ort(self, value: Any) -> Any:
        """An ORT-allocated output (an OrtValue) as this library's array, without a copy."""
        ...

    def from_numpy(self, array: np.ndarray[Any, Any]) -> Any: ...


class NumpyArrays:
    """numpy arrays on the host: a CPU instance without hooks (no torch in its stub)."""

    device = "cpu"

    def __init__(self, stats: RunnerStats) -> None:
        self.stats = stats

    def empty(self, shape: Sequence[int], element_type: ElementType) -> np.ndarray[Any, Any]:
        return np.empty(shape, dtype=_numpy_dtype(element_type))

    def zeros(self, shape: Sequence[int], element_type: ElementType) -> np.ndarray[Any, Any]:
        return np.zeros(shape, dtype=_numpy_dtype(element_type))

    def to_device(self, array: Any) -> np.ndarray[Any, Any]:
        # A torch CPU tensor (a library caller's) reads as a numpy view of its memory. Not
        # np.ascontiguousarray: it makes a scalar one of shape [1] (ndim >= 1), and the binding takes shapes.
        return np.asarray(array, order="C")

    def concatenate(self, arrays: Sequence[Any], into: Any | None) -> np.ndarray[Any, Any]:
        return np.concatenate([self.to_device(a) for a in arrays], axis=0, out=into)

    def pointer(self, array: np.ndarray[Any, Any]) -> int:
        return int(array.ctypes.data)

    def from_ort(self, value: Any) -> np.ndarray[Any, Any]:
        return value.numpy()  # type: ignore[no-any-return]

    def from_numpy(self, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return array


def _numpy_dtype(element_type: ElementType) -> np.dtype[Any]:
    if element_type.numpy_dtype is None:
        raise TypeError(f"{element_type.triton_name} has no numpy dtype: it runs on torch (arrays.py)")
    return element_type.numpy_dtype


ON_TORCH_ON_CPU = "a CPU instance with hooks or BF16 tensors"


def require_torch(what: str) -> None:
    """ProviderError naming how to install torch, where `what` runs on it and this Python lacks it."""
    if importlib.util.find_spec("torch") is None:
        raise ProviderError(
            f"{what} runs on torch, which this Python lacks: install the pinned build of "
            "requirements-cuda.txt (GPU hosts) or requirements-cpu.txt; a CPU instance without hooks "
            "needs none"
        )


class TorchArrays:
    """torch tensors on the session's device (a GPU instance, or an instance with hooks)."""

    def __init__(self, placement: Placement, stats: RunnerStats, pinned_staging: bool = True) -> None:
        require_torch("a GPU instance" if placement.is_cuda else ON_TORCH_ON_CPU)
        import torch

        self._torch = torch
        self.device = torch.device(f"cuda:{placement.device_id}" if placement.is_cuda else "cpu")
        self.stats = stats
        self.pinned_staging = pinned_staging

    def empty(self, shape: Sequence[int], element_type: ElementType) -> torch.Tensor:
        return self._torch.empty(tuple(shape), dtype=element_type.tensor_dtype, device=self.device)

    def zeros(self, shape: Sequence[int], element_type: ElementType) -> torch.Tensor:
        return self._torch.zeros(tuple(shape), dtype=element_type.tensor_dtype, device=self.device)

    def to_device(self, tensor: torch.Tensor | np.ndarray[Any, Any]) -> torch.Tensor:
        # A CPU tensor for a GPU session costs exactly one host-to-device copy; no numpy round trip.
        if isinstance(tensor, np.ndarray):  # a library caller's numpy array: a tensor over its memory
            tensor = self._torch.from_numpy(tensor)
        if tensor.device == self.device:
            return tensor.contiguous()
        if self.device.type == "cuda" and tensor.device.type == "cpu":
            self.stats.host_to_device_copies += 1
            if self.pinned_staging:
                # Through torch's cached pinned host memory: the DMA runs at full speed and asynchronously
                # on the current stream; torch keeps the pinned block until that copy has completed.
                return tensor.contiguous().pin_memory().to(self.device, non_blocking=True)
        elif self.device.type == "cuda" and tensor.device.type == "cuda":
            # On another GPU (e.g. a CUDA-shm region the client registered there): one peer copy, ordered
            # by torch with the current streams of both devices.
            self.stats.device_to_device_copies += 1
        return tensor.to(self.device).contiguous()

    def concatenate(self, arrays: Sequence[Any], into: Any | None) -> torch.Tensor:
        return self._torch.cat([self.to_device(a) for a in arrays], out=into)

    def pointer(self, tensor: torch.Tensor) -> int:
        return int(tensor.data_ptr())

    def from_ort(self, value: Any) -> torch.Tensor:
        """Keeps the OrtValue alive, without a host copy (every supported ORT, 1.23 on, has
        OrtValue.to_dlpack)."""
        import torch.utils.dlpack

        c_value = value._ortvalue if hasattr(value, "_ortvalue") else value
        tensor = torch.utils.dlpack.from_dlpack(c_value.to_dlpack())
        if tensor.numel() == 0:
            # ORT's DLPack gives an empty tensor strides of 0 (NonZero finding nothing: [2, 0], (0, 0)),
            # which pb_utils.Tensor.from_dlpack refuses as not C-contiguous (pb_tensor.cc checks every axis
            # that is not 1, empty ones too), and torch's .contiguous() keeps them. An empty tensor of
            # torch's own has C strides, and there is no data to copy.
            return torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
        return tensor

    def from_numpy(self, array: np.ndarray[Any, Any]) -> torch.Tensor:
        return self._torch.from_numpy(array)


def concatenate(
    arrays: Arrays,
    requests: Sequence[Mapping[str, Any]],
    shared_inputs: frozenset[str],
    into: Mapping[str, Any],
) -> dict[str, Any]:
    """Several requests' tensors as one batch, along axis 0, on the device (into `into`'s buffers where it
    has one of the name); an input that holds one value per run is the group's one value (its key holds
    it), not concatenated."""
    return {
        name: arrays.concatenate([tensors[name] for tensors in requests], into.get(name))
        if name not in shared_inputs
        else requests[0][name]
        for name in requests[0]
    }
