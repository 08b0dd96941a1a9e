"""Inputs and outputs through CUDA shared memory: the only way a remote client's tensors reach the model
on the GPU (numpy in the request body always arrives as CPU memory). Needs a GPU and cuda-bindings.
SystemShmIO does the same through system (POSIX) shared memory, for a client on the server's host."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

UNREGISTER_WAIT_S = 5.0
"""How long a region a request still holds is waited for at exit (see CudaShmIO._unregister)."""


class CudaShmIO:
    """Regions for one model's inputs (filled once) and outputs, registered with the server."""

    def __init__(
        self,
        client: Any,
        model: str,
        inputs: Mapping[str, NDArray[Any]],
        outputs: Mapping[str, tuple[np.dtype[Any], tuple[int, ...]]],
        device_id: int = 0,
    ) -> None:
        self._memory = self._memory_module()
        self.client = client
        self.model = model
        self.inputs = dict(inputs)
        self.outputs = dict(outputs)
        self.device_id = device_id
        self._module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
        self._prefix = f"triton_ort_{uuid.uuid4().hex[:8]}"
        self._regions: dict[str, Any] = {}

    @staticmethod
    def _memory_module() -> Any:
        """tritonclient's module for this kind of region (both have set_shared_memory_region,
        get_contents_as_numpy and destroy_shared_memory_region)."""
        import tritonclient.utils.cuda_shared_memory as cudashm  # imports cuda.bindings: GPU hosts only

        return cudashm

    def _region(self, name: str, byte_size: int) -> str:
        region = f"{self._prefix}_{name}"
        handle = self._memory.create_shared_memory_region(region, byte_size, self.device_id)
        self._regions[name] = handle
        self.client.register_cuda_shared_memory(
            region, self._memory.get_raw_handle(handle), self.device_id, byte_size
        )
        return region

    def __enter__(self) -> CudaShmIO:
        self.infer_inputs = []
        for name, array in self.inputs.items():
            region = self._region(name, array.nbytes)
            self._memory.set_shared_memory_region(self._regions[name], [np.ascontiguousarray(array)])
            item = self._module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            item.set_shared_memory(region, array.nbytes)
            self.infer_inputs.append(item)
        self.requested_outputs = []
        for name, (dtype, shape) in self.outputs.items():
            byte_size = int(np.prod(shape)) * np.dtype(dtype).itemsize
            region = self._region(name, byte_size)
            item = self._module.InferRequestedOutput(name)
            item.set_shared_memory(region, byte_size)
            self.requested_outputs.append(item)
        return self

    def infer(self) -> float:
        """One request over the registered regions; returns its latency in seconds."""
        started = time.perf_counter()
        self.client.infer(self.model, self.infer_inputs, outputs=self.requested_outputs)
        return time.perf_counter() - started

    def read_outputs(self) -> dict[str, NDArray[Any]]:
        return {
            name: self._memory.get_contents_as_numpy(self._regions[name], np.dtype(dtype).type, list(shape))
            for name, (dtype, shape) in self.outputs.items()
        }

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        for name, handle in self._regions.items():
            try:
                self._unregister(f"{self._prefix}_{name}")
            finally:
                self._memory.destroy_shared_memory_region(handle)
        self._regions.clear()

    def _unregister(self, region: str) -> None:
        self._retry_in_use(lambda: self.client.unregister_cuda_shared_memory(region))

    def _retry_in_use(self, unregister: Any) -> None:
        # Triton 2.51 counts a region's users and refuses to unregister one a request still holds ("...
        # it is currently in use"); the server lets go of a request a moment after its response has
        # reached the client, so a region used by the last answer can still be held when we get here.
        deadline = time.monotonic() + UNREGISTER_WAIT_S
        while True:
            try:
                unregister()
                return
            except InferenceServerException as error:
                if "currently in use" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)


class SystemShmIO(CudaShmIO):
    """The same regions in system shared memory (/dev/shm): the server must run on this host."""

    @staticmethod
    def _memory_module() -> Any:
        import tritonclient.utils.shared_memory as sysshm

        return sysshm

    def _region(self, name: str, byte_size: int) -> str:
        region = f"{self._prefix}_{name}"
        key = f"/{region}"
        self._regions[name] = self._memory.create_shared_memory_region(region, key, byte_size)
        self.client.register_system_shared_memory(region, key, byte_size)
        return region

    def _unregister(self, region: str) -> None:
        self._retry_in_use(lambda: self.client.unregister_system_shared_memory(region))
