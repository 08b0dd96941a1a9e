"""How many requests can one python-backend stub keep in flight? The in-flight mode's other question (the
first is ORT's and CUDA's: profile_lanes): whether the python backend itself lets one stub answer requests
that overlap in time, or serialises them. Measured with no ORT and no GPU, so that the stub's machinery is
all there is: each request waits `--wait-ms` with the GIL released (time.sleep, standing in for a run on
a stream of its own) after `--hold-us` of Python that holds the GIL (a request's own work in the stub).

Served in one tritonserver, one instance each, no dynamic batching (one request per execute):
  classic        execute answers its requests itself and returns them (every release)
  inflight_K     execute hands each request to one of K threads and returns None; the thread answers it
                 through its response sender with the FINAL flag (Triton >= 24.06: earlier releases refuse
                 a non-list return, and the model is reported as not loadable there)
Load: client.load's closed loop at `--concurrency`, numpy over gRPC. If the stub does not serialise, an
inflight_K model answers about K / wait requests per second (classic: 1 / wait), until the hold, the
stub's messaging or the client's own rate is the limit.

    python -m diagnostics.inflight_floor --lanes 1 2 4 8 --wait-ms 2 --json results/inflight.json

It needs a Triton that has the response sender on non-decoupled models: nvidia-pytriton 0.7.0 (2.51),
which has stubs for Python 3.12 (the dev venv's 0.5.0 = 2.41 has not); on the CPU machine, a Python 3.12
venv with this checkout installed (`pip install -e '.[cpu,client,server]'`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from client.bench_common import aligned, measure_point, report_of, serving, write_report
from client.load import Workload

MODEL_PY = """
import json
import time
from concurrent.futures import ThreadPoolExecutor

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        value = lambda key: parameters[key]["string_value"]  # noqa: E731
        self.wait_s = float(value("wait_ms")) / 1e3
        self.hold_s = float(value("hold_us")) / 1e6
        lanes = int(value("lanes"))
        self.pool = ThreadPoolExecutor(lanes, thread_name_prefix="lane") if lanes else None

    def _answer(self, request):
        x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
        until = time.perf_counter() + self.hold_s
        while time.perf_counter() < until:  # Python work: holds the GIL
            pass
        time.sleep(self.wait_s)  # a wait with the GIL released, as for a run on a stream
        return pb_utils.InferenceResponse([pb_utils.Tensor("y", x)])

    def _send(self, request):
        sender = request.get_response_sender()
        try:
            response = self._answer(request)
        except Exception as error:
            response = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error)))
        sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def execute(self, requests):
        if self.pool is None:
            return [self._answer(request) for request in requests]
        for request in requests:
            self.pool.submit(self._send, request)
        return None

    def finalize(self):
        if self.pool is not None:
            self.pool.shutdown(wait=True)
"""


def write_repository(repository: Path, lanes: list[int], wait_ms: float, hold_us: float) -> list[str]:
    """The classic model and an in-flight one per lane count; their names."""
    names = {"classic": 0, **{f"inflight_{k}": k for k in lanes}}
    for name, count in names.items():
        version = repository / name / "1"
        version.mkdir(parents=True, exist_ok=True)
        (version / "model.py").write_text(MODEL_PY)
        parameters = {"wait_ms": wait_ms, "hold_us": hold_us, "lanes": count}
        entries = ", ".join(
            f'{{ key: "{k}", value: {{ string_value: "{v}" }} }}' for k, v in parameters.items()
        )
        (repository / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            'input [ { name: "x", data_type: TYPE_FP32, dims: [ 16 ] } ]\n'
            'output [ { name: "y", data_type: TYPE_FP32, dims: [ 16 ] } ]\n'
            "instance_group [ { kind: KIND_CPU, count: 1 } ]\n"
            f"parameters [ {entries} ]\n"
        )
    return list(names)


def ideal_rate(name: str, wait_ms: float, hold_us: float) -> float:
    """Requests per second if nothing but the waits and holds themselves serialised: K lanes overlap K
    waits, and every hold needs the one GIL (inf where a request costs nothing)."""
    lanes = int(name.split("_")[1]) if name.startswith("inflight_") else 1
    per_request_s = wait_ms / 1e3 + hold_us / 1e6
    by_lanes = lanes / per_request_s if per_request_s else float("inf")
    return min(by_lanes, 1e6 / hold_us) if hold_us else by_lanes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repository", type=Path, default=Path("bench_repository") / "inflight")
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--wait-ms", type=float, default=2.0)
    parser.add_argument("--hold-us", type=float, default=0.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--client-processes", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    names = write_repository(args.repository, args.lanes, args.wait_ms, args.hold_us)
    x = np.arange(16, dtype=np.float32)
    work = Workload(Path(), 1, {"x": x}, {"y": x}, {"y": (x.dtype, x.shape)})
    results: dict[str, Any] = {}
    with serving(args.repository, names, extra_args=["--exit-on-error=false"]) as server:
        version = str(grpcclient.InferenceServerClient(server.grpc_url).get_server_metadata().version)
        for name in names:
            print(f"measuring {name}", file=sys.stderr, flush=True)
            try:
                results[name] = measure_point(server.grpc_url, name, work, args.concurrency, args)
            except Exception as error:  # a release without the response sender on this model kind
                results[name] = {"error": str(error)[-500:]}
    ideal = {name: ideal_rate(name, args.wait_ms, args.hold_us) for name in names}
    rows = [
        [name, f"{r['requests_per_s']:.0f}", f"{ideal[name]:.0f}", f"{r['p50_us']:.0f}"]
        if "error" not in r
        else [name, "-", f"{ideal[name]:.0f}", r["error"][:60]]
        for name, r in results.items()
    ]
    print(
        aligned(
            ["model", f"c={args.concurrency} req/s", "if nothing serialised", "p50 us"], rows, range(1, 4)
        )
    )
    if args.json:
        settings = {k: getattr(args, k) for k in ("lanes", "wait_ms", "hold_us", "concurrency", "seconds")}
        report = report_of("diagnostics.inflight_floor", server_version=version, **settings, results=results)
        write_report(args.json, report)


if __name__ == "__main__":
    main()
