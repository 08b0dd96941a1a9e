"""What gathering costs per request, in-process: ModelInstance.infer on N requests of R rows against one
request of N×R rows. Both make the same single ORT run on the same rows, so the difference is what the
library does per request: validation, the group key, concatenation, splitting and the per-request answers
(the python backend's own per-request objects, request.inputs() and the responses, are not in it: the
served benchmark, client.bench, sees those).

Beside them, the same N requests run apart (gather_requests: no, one ORT run each): what a graph that
mixes rows across the batch axis costs, whose requests the library runs so (row_mixing.py). With
--quantized the model is that kind of graph (the linear model through quantize_dynamic) and the gathered
column is forced (gather_requests: yes); its answers are then not compared (they depend on the rows
beside them), the apart ones are, with each request run alone.

The model is bench_hooks' `linear` (one 2010 -> 2 MatMul with the demo's signature), whose run is short
enough that a few microseconds per request show. On a CPU the clock is this thread's CPU time (one ORT
and one torch thread), which other processes' preemptions do not inflate; on a GPU it is wall time, with
the instance's one stream sync per execute. The answers of the two ways are compared; a difference
exits 1.

    python -m diagnostics.bench_gather --device cpu --requests-per-execute 1 4 16 [--quantized] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from client.bench_common import host_environment, linear_onnx, write_report
from triton_ort import ModelInstance, Tensors


def _config(onnx_file: Path, gather: str) -> dict[str, Any]:
    return {
        "max_batch_size": 4096,
        "input": [{"name": "np_script_embeddings", "data_type": "TYPE_FP32", "dims": [2010]}],
        "output": [{"name": "np_logits", "data_type": "TYPE_FP32", "dims": [2]}],
        "instance_group": [{"count": 1}],
        "parameters": {
            "onnx_file": {"string_value": str(onnx_file)},
            "intra_op_thread_count": {"string_value": "1"},
            "output_placement": {"string_value": "device"},  # the comparison is about gathering
            "warmup": {"string_value": "false"},
            "gather_requests": {"string_value": gather},
        },
    }


def _p50(infer: Callable[[], list[Any]], clock: Callable[[], int], calls: int, warmup: int) -> float:
    times = []
    for index in range(warmup + calls):
        started = clock()
        infer()
        if index >= warmup:
            times.append((clock() - started) / 1e3)
    return round(statistics.median(times), 1)


def _logits(answers: list[Any]) -> torch.Tensor:
    return torch.cat([answer["np_logits"].cpu() for answer in answers])


def measure(
    instance: ModelInstance,
    apart: ModelInstance,
    device: str,
    requests: int,
    rows: int,
    calls: int,
    warmup: int,
    mixes_rows: bool = False,
) -> dict[str, Any]:
    clock = time.perf_counter_ns if device == "cuda" else time.thread_time_ns
    joint = torch.randn(requests * rows, 2010, device=device)
    many: list[Tensors] = [{"np_script_embeddings": part} for part in torch.split(joint, rows)]
    one: list[Tensors] = [{"np_script_embeddings": joint}]
    alone = torch.cat([_logits(apart.infer([request])) for request in many])
    agree = torch.allclose(_logits(apart.infer(many)), alone, rtol=1e-5, atol=1e-6)
    if not mixes_rows:  # a graph whose rows do not interact answers the same however its rows are run
        for answers in (instance.infer(many), instance.infer(one)):
            agree = agree and torch.allclose(_logits(answers), alone, rtol=1e-5, atol=1e-6)
    many_us = _p50(lambda: instance.infer(many), clock, calls, warmup)
    one_us = _p50(lambda: instance.infer(one), clock, calls, warmup)
    apart_us = _p50(lambda: apart.infer(many), clock, calls, warmup)
    return {
        "requests": requests,
        "rows_per_request": rows,
        "p50_us": {"gathered": many_us, "one_request": one_us, "apart": apart_us},
        "per_extra_request_us": round((many_us - one_us) / max(requests - 1, 1), 1),
        "apart_per_request_us": round(apart_us / requests, 1),
        "answers_agree": bool(agree),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument("--requests-per-execute", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rows", type=int, default=1, help="rows per request")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument(
        "--quantized", action="store_true", help="the linear model through quantize_dynamic (mixes rows)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)  # as a CPU instance does; the clock is this thread's
    with tempfile.TemporaryDirectory() as scratch:
        onnx_file = linear_onnx(Path(scratch) / "linear.onnx")
        if args.quantized:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantized = Path(scratch) / "quantized.onnx"
            quantize_dynamic(str(onnx_file), str(quantized), weight_type=QuantType.QInt8)
            onnx_file = quantized
        kind = "GPU" if args.device == "cuda" else "CPU"
        instance = ModelInstance(_config(onnx_file, "yes"), Path(scratch), kind, 0)
        apart = ModelInstance(_config(onnx_file, "no"), Path(scratch), kind, 0)
        results = [
            measure(instance, apart, args.device, n, args.rows, args.calls, args.warmup, args.quantized)
            for n in args.requests_per_execute
        ]
    report = {
        "host": host_environment(),
        "device": args.device,
        "model": "linear, quantize_dynamic" if args.quantized else "linear",
        "clock": "wall" if args.device == "cuda" else "thread CPU time",
        "results": results,
    }
    print(json.dumps(report["host"]))
    print(
        "| requests | rows each | N requests, p50 µs | 1 request of N×rows, p50 µs | per extra request, µs "
        "| N requests apart, p50 µs | apart, per request µs |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        p50 = r["p50_us"]
        print(
            f"| {r['requests']} | {r['rows_per_request']} | {p50['gathered']} | {p50['one_request']} "
            f"| {r['per_extra_request_us']} | {p50['apart']} | {r['apart_per_request_us']} |"
        )
    if args.json:
        write_report(args.json, report)
    if not all(r["answers_agree"] for r in results):
        print("answers differ from each request's alone", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
