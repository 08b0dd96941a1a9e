"""CudaShmIO's exit against Triton 2.51's count of a region's users (a fake client: no GPU needed)."""

from __future__ import annotations

import pytest
from tritonclient.utils import InferenceServerException

from triton_ort.cli import cuda_shm
from triton_ort.cli.cuda_shm import CudaShmIO


class _Client:
    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        self.calls = 0

    def unregister_cuda_shared_memory(self, name: str) -> None:
        self.calls += 1
        if self.errors:
            raise InferenceServerException(self.errors.pop(0))


def _io(client: _Client) -> CudaShmIO:
    io = CudaShmIO.__new__(CudaShmIO)  # the constructor imports cuda.bindings, a GPU host's package
    io.client = client
    return io


def test_a_region_still_held_by_the_last_request_is_unregistered_once_released() -> None:
    in_use = "Cannot unregister shared memory region 'r_x', it is currently in use."
    client = _Client([in_use, in_use])
    _io(client)._unregister("r_x")
    assert client.calls == 3


def test_other_unregister_errors_and_a_region_held_too_long_are_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = _Client(["failed to find shared memory region 'r_x'"])
    with pytest.raises(InferenceServerException, match="failed to find"):
        _io(client)._unregister("r_x")
    assert client.calls == 1
    monkeypatch.setattr(cuda_shm, "UNREGISTER_WAIT_S", 0.05)
    client = _Client(["... it is currently in use."] * 1000)
    with pytest.raises(InferenceServerException, match="currently in use"):
        _io(client)._unregister("r_x")
    assert 1 < client.calls < 1000
