"""The `_timed` benchmark variants' stub clock (client/bench_timed_model.py) read back by client.bench_common,
and client.stub_clock's matching of a stub's executes to Triton's compute windows."""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from client.bench_common import (
    FILE_PREFIX,
    HEADER_BYTES,
    RING,
    TOTALS,
    StubClock,
    clock_between,
    read_clocks,
)
from client.stub_clock import compute_windows, mean_steps, split_executes
from tests.paths import ROOT
from triton_ort.stats import ExecuteStats

INNER = """
import gc
import time
from types import SimpleNamespace

from triton_ort.stats import RunnerStats

class TritonPythonModel:
    def initialize(self, args):
        self.finalized = False
        self.instance = SimpleNamespace(runner=SimpleNamespace(stats=RunnerStats()))  # as ours holds it

    def execute(self, requests):
        time.sleep(0.002)
        stats = self.instance.runner.stats
        stats.ort_runs += 1
        stats.bind_seconds += 0.001
        stats.ort_run_seconds += 0.003
        if len(requests) == 3:
            gc.collect()  # a full collection, inside this execute
        return [None for _ in requests]

    def finalize(self):
        self.finalized = True
"""


def timed_model(folder: Path) -> ModuleType:
    """A timed variant's model.py as the stub loads it: the wrapper, its inner model.py beside it."""
    version = folder / "1"
    version.mkdir(parents=True)
    shutil.copy(ROOT / "client" / "bench_timed_model.py", version / "model.py")
    (version / "timed_inner.py").write_text(INNER)
    spec = importlib.util.spec_from_file_location("timed_model_under_test", version / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_execute_is_timed_in_the_stubs_clock_file_and_read_back(tmp_path: Path) -> None:
    module = timed_model(tmp_path / "m")
    model = module.TritonPythonModel()
    model.initialize({"model_repository": str(tmp_path / "m"), "model_version": "1"})
    # the layout the reader expects is the one the writer uses
    layout = (module.FILE_PREFIX, module.HEADER_BYTES, module.RING, module.TOTALS)
    assert layout == (FILE_PREFIX, HEADER_BYTES, RING, TOTALS)
    assert module.HEADER.size <= HEADER_BYTES  # the totals fit before the ring
    before = read_clocks(tmp_path / "m")
    since = time.monotonic_ns()
    answers = [model.execute(["a"] * n) for n in (1, 3, 2)]
    until = time.monotonic_ns()
    assert [len(a) for a in answers] == [1, 3, 2]  # the inner model's answers, untouched
    after = read_clocks(tmp_path / "m")
    (clock,) = after.values()
    assert (clock.executes, clock.requests) == (3, 6)
    starts, ends, requests = clock.entries.T
    assert requests.tolist() == [1, 3, 2]
    assert since <= starts[0] and ends[-1] <= until and (starts[1:] >= ends[:-1]).all()
    assert ((ends - starts) >= 2_000_000).all()  # each execute's 2 ms sleep, on CLOCK_MONOTONIC
    assert clock.inside_ns == int((ends - starts).sum())
    between = clock_between(before, after)
    assert between["executes"] == 3
    assert between["execute_us"] == clock.inside_ns / 3 / 1e3
    assert between["execute_p50_us"] == float(np.median(ends - starts)) / 1e3
    # the stub's collections (gc.callbacks): the one full collection, timed
    assert between["gc_full_runs"] == 1 / 3 and between["gc_runs"] >= 1 / 3
    assert 0 < between["gc_full_us"] <= between["gc_us"] < between["execute_us"]
    # ours' library timers, from the runner's totals after each execute
    assert between["bind_us"] == pytest.approx(1_000) and between["ort_run_us"] == pytest.approx(3_000)
    assert between["to_host_us"] == 0
    # a later reading counts only what came after the earlier one
    model.execute(["a"])
    later = clock_between(after, read_clocks(tmp_path / "m"))
    assert later["executes"] == 1 and later["gc_full_runs"] == 0
    model.finalize()
    assert model.finalized


def test_a_full_ring_is_read_oldest_first(tmp_path: Path) -> None:
    executes = RING + 2
    raw = np.zeros(HEADER_BYTES // 8 + RING * 3, dtype="<i8")
    raw[:3] = (executes, executes, 0)
    ring = raw[HEADER_BYTES // 8 :].reshape(RING, 3)
    for number in range(executes):  # what the writer leaves: execute k in slot k % RING
        ring[number % RING] = (number, number + 1, 1)
    path = tmp_path / f"{FILE_PREFIX}1.bin"
    raw.tofile(path)
    entries = StubClock.read(path).entries
    assert len(entries) == RING
    assert entries[0].tolist() == [2, 3, 1] and entries[-1].tolist() == [executes - 1, executes, 1]


def trace_of(model: str, windows: list[tuple[int, int, int]], first_id: int = 1) -> list[dict[str, object]]:
    """Triton's trace file of requests in these compute windows (start, end, requests of the execute)."""
    trace: list[dict[str, object]] = []
    next_id = first_id
    for start, end, requests in windows:
        for _ in range(requests):
            trace.append({"id": next_id, "model_name": model, "model_version": 1})
            trace.append(
                {
                    "id": next_id,
                    "timestamps": [
                        {"name": "COMPUTE_START", "ns": start - 50},
                        {"name": "COMPUTE_INPUT_END", "ns": start},
                        {"name": "COMPUTE_OUTPUT_START", "ns": end},
                        {"name": "COMPUTE_END", "ns": end + 50},
                    ],
                }
            )
            next_id += 1
    return trace


def test_executes_are_matched_to_the_tightest_compute_window_with_their_requests() -> None:
    # Two instances: B's window (2 requests) holds A's second execute (1 request) too.
    windows = [(1_000, 5_000, 1), (10_000, 20_000, 1), (9_000, 30_000, 2)]
    trace = trace_of("m", windows) + trace_of("other", [(1_000, 5_000, 4)], first_id=100)
    assert compute_windows(trace, "m") == sorted(windows)
    entries = np.array([[1_400, 4_000, 1], [11_000, 19_000, 1], [10_000, 29_000, 2], [50_000, 60_000, 1]])
    split = split_executes(compute_windows(trace, "m"), entries, 0, 40_000)  # the last one is outside
    assert (split["matched"], split["unmatched"]) == (3, 0)
    assert split["before_mean_us"] == (0.4 + 1.0 + 1.0) / 3
    assert split["execute_mean_us"] == (2.6 + 8.0 + 19.0) / 3
    assert split["after_mean_us"] == (1.0 + 1.0 + 1.0) / 3
    assert split["compute_infer_median_us"] == 10.0


def test_an_execute_without_a_window_of_its_requests_is_counted_unmatched() -> None:
    windows = compute_windows(trace_of("m", [(1_000, 5_000, 2)]), "m")
    split = split_executes(windows, np.array([[1_400, 4_000, 1]]), 0, 10_000)
    assert (split["matched"], split["unmatched"]) == (0, 1)


def test_the_library_steps_of_a_point_are_averaged_over_its_records() -> None:
    def record(read: float, infer: float) -> ExecuteStats:
        steps = {"read_inputs": read, "infer_total": infer}
        return ExecuteStats(1, ["cuda:0"], 1, 0, 1, True, steps_us=steps)

    assert mean_steps([record(10, 100), record(20, 300)]) == {
        "read_inputs": 15,
        "infer_total": 200,
        "records": 2,
    }
    assert mean_steps([]) == {}  # a model that logs no records (the null models)


@pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")  # a CPU-only machine
def test_a_window_of_executes_is_profiled_into_the_stubs_profile_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_STUB_PROFILE", "1:2")  # executes 1 and 2
    module = timed_model(tmp_path / "m")
    model = module.TritonPythonModel()
    model.initialize({"model_repository": str(tmp_path / "m"), "model_version": "1"})
    path = tmp_path / "m" / f"profile-{os.getpid()}.txt"
    for _ in range(3):
        model.execute(["a"])
        assert not path.exists()  # written once the window's last execute has returned
    model.execute(["a"])
    assert path.read_text().startswith("2 executes profiled\n")
    model.finalize()
