"""What hooks cost: the demo_hooks example in-process, with the hooks run by the library against the same
ops written inline around the same session, so the difference isolates hook dispatch and the checks of
what hooks return.

Four ways to compute the same answer, all on the hooked instance's one ORT session (two sessions would
each bring their own weights into the caches and charge the reload to whichever runs second), interleaved
call by call in a rotating order so that drift on a busy machine hits them alike:
- runner_inline:  preprocess ops, IOBindingRunner.run, postprocess ops, one stream sync (the floor)
- library_inline: preprocess ops, run_requests on the runner (what ModelInstance.infer runs for a model
                  without hooks), postprocess ops, one stream sync
- library_hooks:  run_requests on the runner with the hooks around it (what ModelInstance.infer runs for
                  a model with hooks), one stream sync
- instance_hooks: ModelInstance.infer with hooks: the above plus the instance's own per-execute steps
The hook overhead is the median over calls of library_hooks - library_inline of the same round. The
answers of the four are compared; a difference exits 1.

Two models with the example's signature: `demo` (the demo's ONNX file) and `linear` (one 2010 -> 2 MatMul,
built here), whose run is short enough that its own jitter does not hide a few microseconds. On a CPU the
clock is this thread's CPU time (ORT and torch run on the calling thread with one thread each), which a
busy machine's preemptions do not inflate; on a GPU it is wall time, which includes the stream sync.

    python -m diagnostics.bench_hooks --device cpu --models demo linear --rows 1 100 [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from client.bench_common import DEMO_ONNX, ROOT, host_environment, linear_onnx, write_report
from triton_ort import ModelInstance, Tensors, run_requests

EXAMPLE = ROOT / "model_repository" / "demo_hooks"
TARGET_US = 30.0


def _example_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_hooks_inline", EXAMPLE / "1" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(onnx_file: Path) -> dict[str, Any]:
    """The example's config as Triton hands it to model.py."""
    parameters = {
        "onnx_file": {"string_value": str(onnx_file)},
        # One ORT thread: the run happens on the calling thread, which the CPU clock then sees whole.
        "intra_op_thread_count": {"string_value": "1"},
        "hooks": {"string_value": str(EXAMPLE / "1" / "hooks.py")},
        # Outputs stay where they are computed in every way: the comparison is about hooks, not placement.
        "output_placement": {"string_value": "device"},
        "warmup": {"string_value": "false"},
    }
    return {
        "max_batch_size": 1024,
        "input": [{"name": "raw_embeddings", "data_type": "TYPE_UINT8", "dims": [2010]}],
        "output": [
            {"name": "top_scores", "data_type": "TYPE_FP32", "dims": [2]},
            {"name": "top_classes", "data_type": "TYPE_INT64", "dims": [2]},
        ],
        "instance_group": [{"count": 1}],
        "parameters": parameters,
    }


class Ways:
    """The four ways, each a function of the raw request returning the outputs (complete on return)."""

    def __init__(self, device: str, model: str, onnx_file: Path) -> None:
        self.hooks = _example_hooks()
        kind = "GPU" if device == "cuda" else "CPU"
        self.instance = ModelInstance(_config(onnx_file), EXAMPLE / "1", kind, 0)
        self.runner = self.instance.runner
        self.hooked = self.instance.batch_runner  # the runner with the hooks around it
        self.stream = self.instance.lane.stream
        self.model = model

    @contextlib.contextmanager
    def _on_stream(self) -> Iterator[None]:
        """An execute of its own (the runner's plans hand out their buffers again, as when served), on the
        instance's stream, waited for at the end, as ModelInstance.infer does."""
        self.runner.reclaim_outputs()
        with torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
            yield
        if self.stream is not None:
            self.stream.synchronize()

    def runner_inline(self, raw: Tensors) -> Tensors:
        with self._on_stream():
            outputs = self.runner.run(self.hooks.preprocess(raw))
            answer: Tensors = self.hooks.postprocess(outputs, raw)
        return answer

    def library_inline(self, raw: Tensors) -> Tensors:
        with self._on_stream():
            (outputs,) = run_requests(self.runner, [self.hooks.preprocess(raw)], gather=True)
            assert isinstance(outputs, dict), outputs
            answer: Tensors = self.hooks.postprocess(outputs, raw)
        return answer

    def library_hooks(self, raw: Tensors) -> Tensors:
        with self._on_stream():
            (answer,) = run_requests(self.hooked, [raw], gather=True)
        assert isinstance(answer, dict), answer
        return answer

    def instance_hooks(self, raw: Tensors) -> Tensors:
        (answer,) = self.instance.infer([raw])
        assert isinstance(answer, dict), answer
        return answer


def _timed(
    way: Callable[[Tensors], Tensors], raw: Tensors, clock: Callable[[], int]
) -> tuple[float, Tensors]:
    started = clock()
    answer = way(raw)
    return (clock() - started) / 1e3, answer


def _same(a: Tensors, b: Tensors) -> bool:
    return a.keys() == b.keys() and all(
        torch.allclose(a[k].cpu().double(), b[k].cpu().double(), rtol=1e-5, atol=1e-6) for k in a
    )


def measure(ways: Ways, device: str, rows: int, calls: int, warmup: int) -> dict[str, Any]:
    clock = time.perf_counter_ns if device == "cuda" else time.thread_time_ns
    raw = {"raw_embeddings": torch.randint(0, 256, (rows, 2010), dtype=torch.uint8, device=device)}
    names = ("runner_inline", "library_inline", "library_hooks", "instance_hooks")
    runs = {name: getattr(ways, name) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    answers: dict[str, Tensors] = {}
    for index in range(warmup + calls):
        for name in names[index % 4 :] + names[: index % 4]:
            elapsed, answer = _timed(runs[name], raw, clock)
            answers[name] = {k: v.clone() for k, v in answer.items()}  # the next way reuses the buffers
            if index >= warmup:
                times[name].append(elapsed)
    overheads = [h - i for h, i in zip(times["library_hooks"], times["library_inline"], strict=True)]
    return {
        "model": ways.model,
        "rows": rows,
        "p50_us": {name: round(statistics.median(t), 1) for name, t in times.items()},
        "hook_overhead_us": round(statistics.median(overheads), 1),
        "answers_agree": all(_same(answers["runner_inline"], answers[name]) for name in names),
    }


def _table(results: list[dict[str, Any]]) -> Iterator[str]:
    yield (
        "| model | rows | runner + ops inline | library + ops inline | library with hooks "
        "| ModelInstance with hooks | hook overhead |"
    )
    yield "|---|---|---|---|---|---|---|"
    for r in results:
        p50 = r["p50_us"]
        yield (
            f"| {r['model']} | {r['rows']} | {p50['runner_inline']} | {p50['library_inline']} "
            f"| {p50['library_hooks']} | {p50['instance_hooks']} | {r['hook_overhead_us']} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", choices=("cpu", "cuda"), default=default_device)
    parser.add_argument("--models", nargs="+", choices=("demo", "linear"), default=["demo", "linear"])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 100])
    parser.add_argument("--calls", type=int, default=2000, help="counted calls of each way")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    if not DEMO_ONNX.exists():
        sys.exit(f"{DEMO_ONNX} is missing: run `make models` first")
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for model in args.models:
            onnx_file = DEMO_ONNX if model == "demo" else linear_onnx(Path(scratch) / "linear.onnx")
            ways = Ways(args.device, model, onnx_file)
            results += [measure(ways, args.device, rows, args.calls, args.warmup) for rows in args.rows]
    clock = "wall" if args.device == "cuda" else "thread CPU time"
    report = {
        "host": host_environment(),
        "device": args.device,
        "clock": clock,
        "target_us": TARGET_US,
        "results": results,
    }
    print(json.dumps(report["host"]))
    print("\n".join(_table(results)))
    if args.json:
        write_report(args.json, report)
    worst = max(r["hook_overhead_us"] for r in results)
    print(
        f"hook overhead: at most {worst} µs per execute (target {TARGET_US} µs): "
        f"{'met' if worst <= TARGET_US else 'MISSED'}"
    )
    if not all(r["answers_agree"] for r in results):
        print("the three ways gave different answers", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
