"""Benchmark only: the model.py beside it (`timed_inner.py`, ours or a null model) with each execute() timed
inside the real stub, by the clock, not by a sampler (client.stub_clock reads it).

Each stub writes into a file of its own in the model's folder, `execute-clock-<pid>.bin`, memory-mapped
(a write costs about a microsecond and no round trip to the server): a header of running totals (TOTALS)
and a ring of the last RING executes, each its (start, end, requests) on CLOCK_MONOTONIC, the clock of
Triton's own trace timestamps, so that an execute can be placed inside the server's compute window of its
requests. The totals also hold the stub's garbage collections (all of them, and the full ones, with the
time they took, from gc.callbacks) and, for ours, the library's own step timers (RunnerStats: binding,
ORT's run, queueing the host copies), read after each execute: the steps without a debug line per execute.

With BENCH_STUB_PROFILE=SKIP:COUNT in the server's environment, each stub also profiles its executes SKIP to
SKIP+COUNT with torch.profiler (CUPTI: the CUDA calls of torch and of ONNX Runtime, the GPU's kernels and
copies) and writes the totals by name into `profile-<pid>.txt` beside its clock file.
"""

import gc
import importlib.util
import mmap
import os
import struct
import time
from pathlib import Path

TOTALS = (
    "executes",
    "requests",
    "inside_ns",
    "gc_runs",
    "gc_ns",
    "gc_full_runs",
    "gc_full_ns",
    "ort_runs",
    "bind_ns",
    "ort_run_ns",
    "to_host_ns",
)
HEADER = struct.Struct(f"<{len(TOTALS)}q")
ENTRY = struct.Struct("<3q")
HEADER_BYTES = 128
RING = 1 << 16
FILE_PREFIX = "execute-clock-"
FULL_GENERATION = 2

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
        self._totals = dict.fromkeys(TOTALS, 0)
        self._gc_started = 0
        # ours: the library's runner totals (a null model has none)
        self._runner_stats = getattr(getattr(getattr(self, "instance", None), "runner", None), "stats", None)
        gc.callbacks.append(self._on_gc)
        skip, _, count = os.environ.get("BENCH_STUB_PROFILE", "").partition(":")
        self._profile_window = (int(skip), int(skip) + int(count)) if count else None
        self._profile_path = Path(args["model_repository"]) / f"profile-{os.getpid()}.txt"
        self._profiler = None

    def _on_gc(self, phase, info):
        if phase == "start":
            self._gc_started = time.monotonic_ns()
            return
        took = time.monotonic_ns() - self._gc_started
        self._totals["gc_runs"] += 1
        self._totals["gc_ns"] += took
        if info.get("generation") == FULL_GENERATION:
            self._totals["gc_full_runs"] += 1
            self._totals["gc_full_ns"] += took

    def _profile_step(self):
        """Start the profiler at the window's first execute; stop it and write its totals after the last."""
        if self._profile_window is None:
            return
        first, end = self._profile_window
        number = self._totals["executes"]
        if number == first:
            import torch.profiler

            activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            self._profiler = torch.profiler.profile(activities=activities)
            self._profiler.start()
        if number != end:
            return
        self._profiler.stop()
        averages = self._profiler.key_averages()
        executes = end - first
        self._profile_path.write_text(
            f"{executes} executes profiled\n"
            + averages.table(sort_by="self_cpu_time_total", row_limit=60, max_name_column_width=70)
            + "\n"
            + averages.table(sort_by="self_device_time_total", row_limit=30, max_name_column_width=70)
        )
        self._profiler = None

    def execute(self, requests):
        self._profile_step()
        started = time.monotonic_ns()
        try:
            return super().execute(requests)
        finally:
            ended = time.monotonic_ns()
            totals = self._totals
            slot = HEADER_BYTES + (totals["executes"] % RING) * ENTRY.size
            ENTRY.pack_into(self._clock, slot, started, ended, len(requests))
            totals["executes"] += 1
            totals["requests"] += len(requests)
            totals["inside_ns"] += ended - started
            if (stats := self._runner_stats) is not None:
                totals["ort_runs"] = stats.ort_runs
                totals["bind_ns"] = int(stats.bind_seconds * 1e9)
                totals["ort_run_ns"] = int(stats.ort_run_seconds * 1e9)
                totals["to_host_ns"] = int(stats.device_to_host_seconds * 1e9)
            HEADER.pack_into(self._clock, 0, *totals.values())

    def finalize(self):
        gc.callbacks.remove(self._on_gc)
        if hasattr(super(), "finalize"):
            super().finalize()
        self._clock.close()
