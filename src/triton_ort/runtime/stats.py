"""What the library counts and times, as data: the runner's running totals and one record per execute().

The debug log carries each execute's record as JSON (`execute stats: {...}`), so the benchmark and the tests
read the same numbers the log shows, through `ExecuteStats.from_log`, instead of parsing prose.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_LOG_MARKER = "execute stats: "


def log_records(text: str, marker: str) -> list[Any]:
    """The JSON value that follows `marker` on each line of a Triton log, in order.

    Triton 2.41 (23.12) writes a python-backend log message as it is; later releases (2.51 seen) quote it
    and escape its double quotes, e.g. `] "execute stats: {\\"requests\\": 1}"`. Both are read here.
    """
    records = []
    for line in text.splitlines():
        _, found, rest = line.partition(marker)
        if not found:
            continue
        if rest.rstrip().endswith('"') and '\\"' in rest:  # an escaped message: unescape its quotes
            rest = rest.replace('\\"', '"')
        records.append(json.JSONDecoder().raw_decode(rest)[0])
    return records


@dataclass
class RunnerStats:
    """Running totals of one runner. The *_seconds fields are host time spent in each step."""

    ort_runs: int = 0
    host_to_device_copies: int = 0
    device_to_host_copies: int = 0
    device_to_device_copies: int = 0
    """Inputs that arrived on another GPU than the session's."""
    binds: int = 0
    """IO binding calls made; a run whose pointers and shapes are unchanged makes none."""
    host_output_runs: int = 0
    """ORT runs whose outputs went to the host (output placement 'host', or 'auto' below the threshold)."""
    arena_shrinks: int = 0
    """Runs that shrank ORT's CUDA arena after a failed run."""
    bind_seconds: float = 0.0
    """Output allocation and IO binding."""
    ort_run_seconds: float = 0.0
    """Inside session.run_with_iobinding: kernel launches (and ORT's end-of-run sync where it does one)."""
    device_to_host_seconds: float = 0.0
    """Queueing the copies of host-placed outputs (the copies complete at the caller's stream sync)."""

    def snapshot(self) -> RunnerStats:
        return dataclasses.replace(self)


def total_stats(lanes: Iterable[RunnerStats]) -> RunnerStats:
    """The lanes' runner totals added up (the runners of one instance that keeps requests in flight)."""
    total = RunnerStats()
    for stats in lanes:
        for item in dataclasses.fields(RunnerStats):
            setattr(total, item.name, getattr(total, item.name) + getattr(stats, item.name))
    return total


@dataclass(frozen=True)
class ExecuteStats:
    """One execute(): what ran, where the data was, and where the host time went (µs)."""

    requests: int
    input_devices: list[str]
    ort_runs: int
    host_to_device_copies: int
    device_to_host_copies: int
    outputs_on_host: bool
    steps_us: dict[str, float] = field(default_factory=dict)
    device_to_device_copies: int = 0

    @classmethod
    def between(
        cls,
        before: RunnerStats,
        after: RunnerStats,
        requests: int,
        input_devices: list[str],
        steps_us: dict[str, float],
    ) -> ExecuteStats:
        runner_steps = {
            "bind": after.bind_seconds - before.bind_seconds,
            "ort_run": after.ort_run_seconds - before.ort_run_seconds,
            "device_to_host": after.device_to_host_seconds - before.device_to_host_seconds,
        }
        return cls(
            requests=requests,
            input_devices=input_devices,
            ort_runs=after.ort_runs - before.ort_runs,
            host_to_device_copies=after.host_to_device_copies - before.host_to_device_copies,
            device_to_host_copies=after.device_to_host_copies - before.device_to_host_copies,
            outputs_on_host=after.host_output_runs > before.host_output_runs,
            device_to_device_copies=after.device_to_device_copies - before.device_to_device_copies,
            steps_us={**{k: round(v * 1e6, 1) for k, v in runner_steps.items()}, **steps_us},
        )

    def with_steps(self, **steps_us: float) -> ExecuteStats:
        return dataclasses.replace(self, steps_us={**self.steps_us, **steps_us})

    def log_line(self) -> str:
        return _LOG_MARKER + json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_log(cls, text: str) -> list[ExecuteStats]:
        """Every record in a log, in order (Triton's prefix before the marker is ignored)."""
        return [cls(**record) for record in log_records(text, _LOG_MARKER)]
