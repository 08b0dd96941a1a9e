"""Load generation for the benchmark: request tensors, closed-loop loops, and load from several processes.

Kept free of torch, so that the load-generating child processes (`python -m client.load`, started by
`load_in_processes`) start in a second: one Python process with one GIL tops out near the server's own
rate, so above concurrency 1 the load comes from several of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import pickle
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from numpy.typing import NDArray

from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.transport import infer_inputs

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Workload:
    """One model's request: its inputs, the expected answer, and the output layout for shared memory;
    and, in `others`, more requests of the same model (images of other sizes) that the load cycles
    through with it, each with its own inputs, answer and layout."""

    onnx_path: Path
    batch: int
    inputs: dict[str, NDArray[Any]]
    reference: dict[str, NDArray[Any]]
    layout: dict[str, tuple[np.dtype[Any], tuple[int, ...]]]
    others: tuple[Workload, ...] = ()

    @property
    def requests(self) -> tuple[Workload, ...]:
        """Every request the load sends, in the order each worker cycles through them."""
        return (self, *self.others)

    @property
    def output_bytes(self) -> int:
        return sum(int(np.prod(shape)) * dtype.itemsize for dtype, shape in self.layout.values())

    @classmethod
    def build(cls, model: str, repository: Path, batch: int) -> Workload:
        from onnxruntime import InferenceSession

        onnx_path = repository / model / "1" / "model.onnx"
        session = InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        spec, out = session.get_inputs()[0], session.get_outputs()[0]
        x = np.random.default_rng(0).standard_normal((batch, *spec.shape[1:])).astype(np.float32)
        inputs = {spec.name: x}
        layout = {out.name: (np.dtype(np.float32), (batch, *out.shape[1:]))}
        return cls(onnx_path, batch, inputs, reference_outputs(onnx_path, inputs), layout)


Worker = list[tuple[list[Any], list[Any]]]
"""One closed-loop client's requests, (inputs, requested outputs) each, which it sends in turn."""


@contextlib.contextmanager
def request_workers(
    client: grpcclient.InferenceServerClient, model: str, transport: str, work: Workload, concurrency: int
) -> Iterator[tuple[list[Worker], Callable[..., dict[str, NDArray[Any]]]]]:
    """`concurrency` workers, each with its own request tensors for every request of the workload (and
    its own CUDA-shm regions), and a function that sends request k (default 0) of the first worker once
    and returns the answer."""
    with contextlib.ExitStack() as stack:
        if transport == "cuda-shm":
            from triton_ort.cli.cuda_shm import CudaShmIO

            regions = [
                [stack.enter_context(CudaShmIO(client, model, w.inputs, w.layout)) for w in work.requests]
                for _ in range(concurrency)
            ]

            def ask(k: int = 0) -> dict[str, NDArray[Any]]:
                regions[0][k].infer()
                return regions[0][k].read_outputs()

            yield [[(r.infer_inputs, r.requested_outputs) for r in worker] for worker in regions], ask
        else:
            workers = [
                [
                    (
                        infer_inputs(grpcclient, w.inputs),
                        [grpcclient.InferRequestedOutput(n) for n in w.layout],
                    )
                    for w in work.requests
                ]
                for _ in range(concurrency)
            ]

            def ask(k: int = 0) -> dict[str, NDArray[Any]]:
                inputs, outputs = workers[0][k]
                result = client.infer(model, inputs, outputs=outputs)
                return {name: result.as_numpy(name) for name in work.requests[k].layout}

            yield workers, ask


async def closed_loop(
    url: str, model: str, workers: list[Worker], warmup_s: float, duration_s: float
) -> tuple[list[float], float]:
    """Closed-loop load: one task per worker, each with its own request tensors, which it sends in turn
    (worker i starting at its request i, so that the requests in flight mix)."""
    client = grpcaio.InferenceServerClient(url)
    latencies: list[float] = []
    measuring = False
    turns = [itertools.islice(itertools.cycle(w), i % len(w), None) for i, w in enumerate(workers)]

    async def worker(requests: Iterator[tuple[list[Any], list[Any]]], stop_at: float) -> None:
        while time.perf_counter() < stop_at:
            inputs, outputs = next(requests)
            t0 = time.perf_counter()
            await client.infer(model, inputs, outputs=outputs)
            if measuring:
                latencies.append(time.perf_counter() - t0)

    try:
        warm_until = time.perf_counter() + warmup_s
        await asyncio.gather(*(worker(t, warm_until) for t in turns))
        measuring = True
        started = time.perf_counter()
        await asyncio.gather(*(worker(t, started + duration_s) for t in turns))
        return latencies, time.perf_counter() - started
    finally:
        await client.close()


def load_in_processes(
    url: str,
    model: str,
    transport: str,
    work: Workload,
    concurrency: int,
    processes: int,
    timing: tuple[float, float],
) -> tuple[list[float], float]:
    """Closed-loop load from `processes` child processes that share `concurrency` between them; returns
    every latency and the summed request rate. The children set up (regions, channels), say so, and
    start together when told."""
    processes = max(1, min(concurrency, processes))
    shares = [concurrency // processes + (i < concurrency % processes) for i in range(processes)]
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "client.load"], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        for _ in shares
    ]
    try:
        for child, share in zip(children, shares, strict=True):
            assert child.stdin is not None
            pickle.dump((url, model, transport, work, share, timing), child.stdin)
            child.stdin.flush()
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"a load process for {model} failed to start (exit {child.wait()})")
        for child in children:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            child.stdin.close()
        gathered = [pickle.load(child.stdout) for child in children if child.stdout is not None]
    finally:
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=30)
            if child.poll() is None:
                child.kill()
    latencies = [latency for child_latencies, _ in gathered for latency in child_latencies]
    return latencies, sum(len(lat) / wall for lat, wall in gathered if wall > 0)


def main() -> None:
    """Child side of load_in_processes: read the job, set up, report ready, wait for go, load, report."""
    url, model, transport, work, concurrency, (warmup_s, duration_s) = pickle.load(sys.stdin.buffer)
    client = grpcclient.InferenceServerClient(url)
    with request_workers(client, model, transport, work, concurrency) as (workers, _):
        sys.stdout.buffer.write(b"ready\n")
        sys.stdout.buffer.flush()
        sys.stdin.buffer.readline()
        result = asyncio.run(closed_loop(url, model, workers, warmup_s, duration_s))
    pickle.dump(result, sys.stdout.buffer)
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
