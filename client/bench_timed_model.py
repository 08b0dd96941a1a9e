"""Benchmark only: the model.py beside it (`timed_inner.py`, ours or a null model) with each execute() timed
inside the real stub, by the clock, not by a sampler (client.stub_clock reads it).

Each stub writes into a file of its own in the model's folder, `execute-clock-<pid>.bin`, memory-mapped
(a write costs about a microsecond and no round trip to the server): a header of three counters (executes,
requests, ns inside execute()) and a ring of the last RING executes, each its (start, end, requests) on
CLOCK_MONOTONIC, the clock of Triton's own trace timestamps, so that an execute can be placed inside the
server's compute window of its requests.
"""

import importlib.util
import mmap
import os
import struct
import time
from pathlib import Path

HEADER = struct.Struct("<3q")
ENTRY = struct.Struct("<3q")
HEADER_BYTES = 64
RING = 1 << 16
FILE_PREFIX = "execute-clock-"

_spec = importlib.util.spec_from_file_location(
    f"timed_inner_{os.getpid()}", Path(__file__).with_name("timed_inner.py")
)
_inner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_inner)


class TritonPythonModel(_inner.TritonPythonModel):
    def initialize(self, args):
        super().initialize(args)
        path = Path(args["model_repository"]) / f"{FILE_PREFIX}{os.getpid()}.bin"
        with path.open("wb") as file:
            file.truncate(HEADER_BYTES + RING * ENTRY.size)
        with path.open("r+b") as file:
            self._clock = mmap.mmap(file.fileno(), 0)
        self._executes = self._requests = self._inside_ns = 0

    def execute(self, requests):
        started = time.monotonic_ns()
        try:
            return super().execute(requests)
        finally:
            ended = time.monotonic_ns()
            slot = HEADER_BYTES + (self._executes % RING) * ENTRY.size
            ENTRY.pack_into(self._clock, slot, started, ended, len(requests))
            self._executes += 1
            self._requests += len(requests)
            self._inside_ns += ended - started
            HEADER.pack_into(self._clock, 0, self._executes, self._requests, self._inside_ns)

    def finalize(self):
        if hasattr(super(), "finalize"):
            super().finalize()
        self._clock.close()
