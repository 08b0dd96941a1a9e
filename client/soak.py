"""Soak a model with a mixed stream of good and malformed requests at a fixed concurrency; check every answer.

python -m client.soak --local                                   # the demo on the local server, 5,000 requests
python -m client.soak --local --requests 600000 --duration 900 --warmup 60000   # the long run: make soak
python -m client.soak --http-url H:8000 --grpc-url H:8001 --server-pid PID --model-repository REPO

Good requests (random batch sizes; some with NaN/Inf rows; an optional input in about every other one) are
checked against in-process ONNX Runtime.
Malformed requests (wrong dtype, rank, inner dimension, batch above max_batch_size, unknown or missing input,
BYTES data) must get the error their kind promises: INVALID_ARGUMENT (HTTP 400) and a message naming it.
Requests alternate between HTTP and gRPC. The run stops at --requests or --duration, whichever comes first.

The RSS of tritonserver and of its python-backend stubs is read every second after a warm-up (psutil), their
GPU memory every --print-every seconds (nvidia-smi, where there is one). Each of the three is judged on its
own floor: the lowest reading of the last third of the run minus the lowest of the first third, against
its own limit (docs/reliability.md says why each is what it is). tritonserver's RSS swings by tens of MiB
with the requests in flight (64 of them, some of 8 MB) and the stubs' hardly at all, so one sum would hide
a stub leak inside the server's swing; a leak raises a floor, requests in flight do not. Exit status 1 on
any wrong or lost answer, or a floor risen beyond its limit; the summary says which.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc.aio as grpcaio
import tritonclient.http.aio as httpaio
from numpy.typing import NDArray
from tqdm import tqdm
from tritonclient.utils import InferenceServerException

from triton_ort.harness.malformed import malformed_requests
from triton_ort.harness.processes import MIB, MemorySnapshot
from triton_ort.harness.reference import compare, random_array, reference_outputs
from triton_ort.harness.releases import Release, server_release
from triton_ort.harness.server import exit_on_termination
from triton_ort.harness.transport import (
    TensorMeta,
    WireTensor,
    infer_inputs,
    make_client,
    model_config,
    model_metadata,
    tensor_metas,
)
from triton_ort.model.input_ranges import ValueRange, index_ranges_in_file, value_ranges

# gRPC statuses that mean no answer came (the HTTP client raises its transport's exceptions instead).
CONNECTION_STATUSES = {
    "StatusCode.UNAVAILABLE",
    "StatusCode.DEADLINE_EXCEEDED",
    "StatusCode.CANCELLED",
    "None",
}


@dataclass(frozen=True)
class SoakRequest:
    kind: str
    inputs: tuple[WireTensor, ...]
    want: Mapping[str, NDArray[Any]] | None = None  # the answer of a good request
    error: re.Pattern[str] | None = None  # what the error of a bad request must say
    statuses: frozenset[str] = frozenset()  # the statuses a bad request may get (HTTP and gRPC)


@dataclass
class ModelFacts:
    name: str
    inputs: list[TensorMeta]
    outputs: list[str]
    max_batch_size: int
    onnx_path: Path
    optional: frozenset[str] = frozenset()
    """Inputs a request may leave out (`optional: true` in the served config): good requests send each
    of them about every other time, malformed ones never, and none is required."""
    ranges: Mapping[str, ValueRange] = field(default_factory=dict)
    """The values of integer inputs: the tables they index in the ONNX file, else the served config's
    input_ranges, else 0 or 1 (triton_ort.model.input_ranges)."""


def read_model_facts(client: Any, model: str, model_repository: Path) -> ModelFacts:
    metadata = model_metadata(client, model)
    onnx_file = "model.onnx"
    config = model_config(client, model)
    parameters = config.get("parameters", {})
    if "onnx_file" in parameters:
        onnx_file = parameters["onnx_file"].get("string_value", onnx_file)
    return ModelFacts(
        name=model,
        inputs=tensor_metas(metadata, "inputs"),
        outputs=[meta.name for meta in tensor_metas(metadata, "outputs")],
        max_batch_size=int(config.get("max_batch_size", 0)),
        onnx_path=model_repository / model / "1" / onnx_file,
        optional=frozenset(str(e["name"]) for e in config.get("input", []) if e.get("optional")),
        ranges=_value_ranges(metadata, config, model_repository / model / "1" / onnx_file),
    )


def _value_ranges(
    metadata: Mapping[str, Any], config: Mapping[str, Any], onnx_path: Path
) -> dict[str, ValueRange]:
    """The soak reads the model's file, so the graph's tables come first (a file it cannot read: none)."""
    try:
        from_graph = index_ranges_in_file(onnx_path)
    except Exception:  # a hooked model's or another backend's file: the served config and the default
        from_graph = {}
    datatypes = [(meta.name, meta.datatype) for meta in tensor_metas(metadata, "inputs")]
    return {**value_ranges(datatypes, config, {}), **from_graph}


def _wire(arrays: Mapping[str, NDArray[Any]], facts: ModelFacts) -> tuple[WireTensor, ...]:
    types = {meta.name: meta.datatype for meta in facts.inputs}
    return tuple(WireTensor(name, array, types[name]) for name, array in arrays.items())


def good_requests(facts: ModelFacts, count: int, max_rows: int, seed: int) -> list[SoakRequest]:
    """Distinct good requests with their answers; every fourth float request carries NaN/Inf rows."""
    rng = np.random.default_rng(seed)
    batched = facts.max_batch_size > 0
    batches = []
    for _ in range(count):
        rows = int(rng.integers(1, max(1, min(max_rows, facts.max_batch_size or 1)) + 1))
        # an optional input goes in about every other request: answers with and without it are checked
        sent = [m for m in facts.inputs if m.name not in facts.optional or rng.random() < 0.5]
        batches.append(
            {meta.name: random_array(meta, rows, rng, facts.ranges.get(meta.name)) for meta in sent}
        )
    kinds = []
    for index, batch in enumerate(batches):
        floats = [a for a in batch.values() if a.dtype.kind == "f"]
        if index % 4 == 3 and floats and batched:
            floats[0][0].flat[0] = np.nan  # one NaN in the first row, one Inf in the last:
            floats[0][-1].flat[-1] = np.inf  # passed through, never an error
            kinds.append("good_nan_inf")
        else:
            kinds.append("good")
    wants = [reference_outputs(facts.onnx_path, batch) for batch in batches]
    return [
        SoakRequest(kind, _wire(batch, facts), want=want)
        for kind, batch, want in zip(kinds, batches, wants, strict=True)
    ]


def bad_requests(facts: ModelFacts, release: Release, seed: int) -> list[SoakRequest]:
    """The catalogue's malformed requests for the model (triton_ort.harness.malformed)."""
    return [
        SoakRequest(m.kind, m.inputs, error=m.says, statuses=release.statuses(m.code))
        for m in malformed_requests(
            facts.name, facts.inputs, facts.max_batch_size, seed, optional=sorted(facts.optional)
        )
    ]


@dataclass
class Tally:
    sent: int = 0
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    interrupted: bool = False

    def record(self, kind: str, outcome: str, problem: str | None = None) -> None:
        self.outcomes[(kind, outcome)] += 1
        if problem and len(self.problems) < 20:
            self.problems.append(f"{kind}: {problem}")

    def count(self, outcome: str) -> int:
        return sum(n for (_, seen), n in self.outcomes.items() if seen == outcome)


async def send_one(
    client: Any, module: Any, model: str, request: SoakRequest, timeout_s: float, tally: Tally, tol: float
) -> None:
    """One request; its outcome: ok, expected_error, wrong (answer, error text or status), or lost."""
    outputs = list(request.want) if request.want is not None else None
    requested = [module.InferRequestedOutput(name) for name in outputs] if outputs else None
    started = time.perf_counter()
    try:
        call = client.infer(model, infer_inputs(module, request.inputs), outputs=requested)
        result = await asyncio.wait_for(call, timeout_s)
    except InferenceServerException as error:
        status, message = str(error.status()), str(error.message())
        if status in CONNECTION_STATUSES:
            tally.record(request.kind, "lost", f"{status} {message[:200]}")
        elif request.error is None:
            tally.record(request.kind, "wrong", f"a good request failed: {status} {message[:200]}")
        elif status not in request.statuses or not request.error.search(message):
            tally.record(request.kind, "wrong", f"unexpected error {status} {message[:200]}")
        else:
            tally.record(request.kind, "expected_error")
        return
    except Exception as error:  # no answer: a timeout, a dropped connection, a client failure
        tally.record(request.kind, "lost", f"{type(error).__name__}: {str(error)[:200]}")
        return
    tally.latencies.append(time.perf_counter() - started)
    if request.want is None:
        tally.record(request.kind, "wrong", "a malformed request was answered as if it were good")
        return
    got = {name: array for name in request.want if (array := result.as_numpy(name)) is not None}
    problems = compare(got, request.want, rtol=tol, atol=tol)
    if problems:
        tally.record(request.kind, "wrong", f"{problems[0]} (against in-process ONNX Runtime)")
        return
    tally.record(request.kind, "ok")


@contextlib.asynccontextmanager
async def _clients(http_url: str, grpc_url: str, concurrency: int) -> AsyncIterator[dict[str, Any]]:
    http = httpaio.InferenceServerClient(http_url, conn_limit=concurrency)
    grpc = grpcaio.InferenceServerClient(grpc_url)
    try:
        yield {"http": http, "grpc": grpc}
    finally:
        await http.close()
        await grpc.close()


@dataclass
class SoakSettings:
    model: str
    requests: int
    duration_s: float
    concurrency: int
    bad_fraction: float
    protocols: tuple[str, ...]
    warmup: int
    timeout_s: float
    tolerance: float
    seed: int


async def run_soak(
    settings: SoakSettings,
    http_url: str,
    grpc_url: str,
    good: list[SoakRequest],
    bad: list[SoakRequest],
    on_warm: Callable[[], None] | None = None,
    sample: Callable[[Tally], None] | None = None,
    sample_every_s: float = 10.0,
) -> Tally:
    """Send until `requests` have been sent or `duration_s` has passed; wait for every answer. `on_warm`
    runs once after the warm-up requests, `sample` every `sample_every_s` seconds (memory readings). A
    progress bar shows on a terminal only (tqdm's disable=None); the samples print as plain lines."""
    tally = Tally()
    rng = np.random.default_rng(settings.seed)
    picks = (
        rng.random(settings.requests) < settings.bad_fraction if bad else np.zeros(settings.requests, bool)
    )
    choices = rng.integers(0, 1 << 30, settings.requests)
    modules = {"http": httpaio, "grpc": grpcaio}
    deadline = time.monotonic() + settings.duration_s
    next_index = 0
    warm = asyncio.Event()

    stop = asyncio.Event()

    def interrupt() -> None:
        tally.interrupted = True
        stop.set()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        # Ctrl-C or SIGTERM: send nothing more, wait for the answers in flight, summarise, stop the server.
        loop.add_signal_handler(signum, interrupt)

    async with _clients(http_url, grpc_url, settings.concurrency) as clients:

        async def worker() -> None:
            nonlocal next_index
            while next_index < settings.requests and time.monotonic() < deadline and not stop.is_set():
                index = next_index
                next_index += 1
                pool = bad if picks[index] else good
                request = pool[int(choices[index]) % len(pool)]
                protocol = settings.protocols[index % len(settings.protocols)]
                tally.sent += 1
                await send_one(
                    clients[protocol],
                    modules[protocol],
                    settings.model,
                    request,
                    settings.timeout_s,
                    tally,
                    settings.tolerance,
                )
                progress.update()
                if tally.sent >= settings.warmup and not warm.is_set():
                    warm.set()
                    if on_warm is not None:
                        on_warm()

        async def sampler() -> None:
            while sample is not None:
                await asyncio.sleep(sample_every_s)
                sample(tally)

        sampling = asyncio.ensure_future(sampler())
        progress = tqdm(total=settings.requests, unit="req", disable=None, mininterval=1.0)
        try:
            await asyncio.gather(*(worker() for _ in range(settings.concurrency)))
        finally:
            progress.close()
            sampling.cancel()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
    return tally


# --- the command ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def _server(args: argparse.Namespace) -> Iterator[tuple[str, str, int | None]]:
    if not args.local:
        yield args.http_url, args.grpc_url, args.server_pid
        return
    from triton_ort.harness.server import LocalTritonServer

    print(f"starting the local tritonserver on {args.model_repository} ...", flush=True)
    with LocalTritonServer(args.model_repository) as server:
        assert server.process is not None
        yield server.http_url, server.grpc_url, server.process.pid


def floor_growth(readings: Sequence[int]) -> int | None:
    """How far the floor of `readings` (in time order) rose: the lowest of the last third minus the lowest
    of the first third. Transient memory (requests in flight) lifts single readings, not the floor; a leak
    lifts the floor. None with fewer than two readings."""
    if len(readings) < 2:
        return None
    third = max(1, len(readings) // 3)
    return min(readings[-third:]) - min(readings[:third])


def _mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / MIB:.1f} MiB"


# What each memory verdict judges, by its key in the summary and in MemoryReadings.
MEMORY_PARTS = {"stubs": "the stubs' RSS", "tritonserver": "tritonserver's RSS", "gpu": "GPU memory"}


@dataclass
class MemoryReadings:
    """The soak's memory readings after the warm-up, in time order, in bytes: tritonserver's own RSS, the
    sum of its children's (the python-backend stubs), and the GPU memory of all of them."""

    tritonserver: list[int] = field(default_factory=list)
    stubs: list[int] = field(default_factory=list)
    gpu: list[int] = field(default_factory=list)

    def add(self, snapshot: MemorySnapshot, server_pid: int) -> None:
        server = snapshot.rss.get(server_pid, 0)
        self.tritonserver.append(server)
        self.stubs.append(snapshot.rss_total - server)
        if snapshot.gpu_total is not None:
            self.gpu.append(snapshot.gpu_total)

    def growth(self) -> dict[str, int | None]:
        """Each part's floor growth (bytes; None without two readings)."""
        return {part: floor_growth(getattr(self, part)) for part in MEMORY_PARTS}


def memory_failures(growth: Mapping[str, int | None], limits_mib: Mapping[str, float]) -> list[str]:
    """One line for each part whose floor rose beyond its own limit."""
    return [
        f"{MEMORY_PARTS[part]} grew {_mib(grown)} (its floor; limit {limits_mib[part]:g} MiB)"
        for part, grown in growth.items()
        if grown is not None and grown > limits_mib[part] * MIB
    ]


def memory_limits(args: argparse.Namespace) -> dict[str, float]:
    return {
        "stubs": args.max_stub_rss_growth_mib,
        "tritonserver": args.max_server_rss_growth_mib,
        "gpu": args.max_gpu_growth_mib,
    }


def summarise(
    tally: Tally,
    elapsed_s: float,
    before: MemorySnapshot | None,
    after: MemorySnapshot | None,
    readings: MemoryReadings,
    ready: bool,
    args: argparse.Namespace,
) -> dict[str, Any]:
    latencies = sorted(tally.latencies)
    growth = readings.growth()
    limits = memory_limits(args)
    failures = []
    if tally.count("wrong"):
        failures.append(f"{tally.count('wrong')} wrong answer(s)")
    if tally.count("lost"):
        failures.append(f"{tally.count('lost')} lost request(s)")
    failures += memory_failures(growth, limits)
    if not ready:
        failures.append("the server was not ready at the end")
    if tally.interrupted:
        failures.append("interrupted before the end")
    return {
        "model": args.model,
        "sent": tally.sent,
        "answered": sum(tally.outcomes.values()),
        "ok": tally.count("ok"),
        "expected_errors": tally.count("expected_error"),
        "wrong": tally.count("wrong"),
        "lost": tally.count("lost"),
        "outcomes": {f"{kind}/{outcome}": n for (kind, outcome), n in sorted(tally.outcomes.items())},
        "problems": tally.problems,
        "elapsed_s": round(elapsed_s, 1),
        "requests_per_s": round(tally.sent / elapsed_s, 1) if elapsed_s else None,
        "latency_ms_p50_p99": [round(1e3 * latencies[int(q * (len(latencies) - 1))], 2) for q in (0.5, 0.99)]
        if latencies
        else None,
        "rss_after_warmup_mib": None if before is None else round(before.rss_total / MIB, 1),
        "rss_end_mib": None if after is None else round(after.rss_total / MIB, 1),
        "memory_growth_mib": {
            part: None if grown is None else round(grown / MIB, 1) for part, grown in growth.items()
        },
        "memory_limits_mib": limits,
        "memory_range_mib": {
            part: [round(min(values) / MIB, 1), round(max(values) / MIB, 1)] if values else None
            for part, values in ((part, getattr(readings, part)) for part in MEMORY_PARTS)
        },
        "rss_readings": len(readings.stubs),
        "gpu_readings": len(readings.gpu),
        "rss_by_process_mib": None
        if after is None
        else {str(pid): round(rss / MIB, 1) for pid, rss in sorted(after.rss.items())},
        "gpu_after_warmup_mib": None
        if before is None or before.gpu_total is None
        else before.gpu_total // MIB,
        "gpu_end_mib": None if after is None or after.gpu_total is None else after.gpu_total // MIB,
        "server_ready_at_end": ready,
        "concurrency": args.concurrency,
        "protocols": args.protocols,
        "failures": failures,
        "passed": not failures,
    }


def _print_summary(summary: dict[str, Any]) -> None:
    print(
        f"sent {summary['sent']}, answered {summary['answered']} in {summary['elapsed_s']} s "
        f"({summary['requests_per_s']} req/s, concurrency {summary['concurrency']}, {summary['protocols']}); "
        f"latency p50/p99 {summary['latency_ms_p50_p99']} ms"
    )
    print(
        f"ok {summary['ok']}, expected errors {summary['expected_errors']}, "
        f"wrong {summary['wrong']}, lost {summary['lost']}"
    )
    for key, count in summary["outcomes"].items():
        print(f"  {key:<32} {count}")
    for problem in summary["problems"]:
        print(f"  problem: {problem}")
    print(
        f"tritonserver + stubs RSS: {summary['rss_after_warmup_mib']} MiB after warm-up, "
        f"{summary['rss_end_mib']} MiB at the end ({summary['rss_readings']} readings); "
        f"GPU: {summary['gpu_after_warmup_mib']} -> {summary['gpu_end_mib']} MiB "
        f"({summary['gpu_readings']} readings)"
    )
    for part, what in MEMORY_PARTS.items():
        print(
            f"  {what:<20} in {summary['memory_range_mib'][part]} MiB, floor growth "
            f"{summary['memory_growth_mib'][part]} MiB (limit {summary['memory_limits_mib'][part]:g} MiB)"
        )
    print("PASSED" if summary["passed"] else "FAILED: " + "; ".join(summary["failures"]), flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--local", action="store_true", help="start (and stop) the local tritonserver")
    parser.add_argument("--model-repository", type=Path, default=Path("model_repository"))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--http-url", default="127.0.0.1:8000")
    parser.add_argument("--grpc-url", default="127.0.0.1:8001")
    parser.add_argument("--server-pid", type=int, help="tritonserver's pid, to measure memory (not --local)")
    parser.add_argument("--requests", type=int, default=5000, help="stop after this many requests")
    parser.add_argument("--duration", type=float, default=120.0, help="or after this many seconds")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--bad-fraction", type=float, default=0.25)
    parser.add_argument("--protocols", default="http,grpc", help="comma-separated, used in turn")
    parser.add_argument(
        "--warmup", type=int, help="requests before the memory baseline (default: a tenth, at least 500)"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a request counts lost")
    parser.add_argument("--max-rows", type=int, default=8, help="largest batch of a good request")
    # The limits on each floor's rise; docs/reliability.md ("How memory growth is judged") gives the evidence.
    parser.add_argument("--max-stub-rss-growth-mib", type=float, default=32.0)
    parser.add_argument("--max-server-rss-growth-mib", type=float, default=128.0)
    parser.add_argument("--max-gpu-growth-mib", type=float, default=64.0)
    parser.add_argument("--tolerance", type=float, default=1e-3, help="rtol and atol (TF32 on GPUs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample-every", type=float, default=1.0, help="seconds between RSS readings")
    parser.add_argument("--print-every", type=float, default=10.0, help="seconds between progress lines")
    parser.add_argument("--json", type=Path, help="also write the summary here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    exit_on_termination()  # a stopped soak still stops the server it started
    protocols = tuple(p for p in args.protocols.split(",") if p)
    if not protocols or any(p not in ("http", "grpc") for p in protocols):
        sys.exit(f"--protocols {args.protocols!r}: use http, grpc or http,grpc")
    settings = SoakSettings(
        model=args.model,
        requests=args.requests,
        duration_s=args.duration,
        concurrency=args.concurrency,
        bad_fraction=args.bad_fraction,
        protocols=protocols,
        warmup=min(
            args.warmup if args.warmup is not None else max(500, args.requests // 10),
            max(1, args.requests // 2),
        ),
        timeout_s=args.timeout,
        tolerance=args.tolerance,
        seed=args.seed,
    )
    with _server(args) as (http_url, grpc_url, server_pid):
        client = make_client("http", http_url)
        facts = read_model_facts(client, args.model, args.model_repository)
        good = good_requests(facts, count=64, max_rows=args.max_rows, seed=args.seed)
        release = server_release(http_url)
        bad = bad_requests(facts, release, seed=args.seed) if args.bad_fraction > 0 else []
        print(
            f"soaking {args.model!r}: up to {args.requests} requests or {args.duration:.0f} s, concurrency "
            f"{args.concurrency}, {args.bad_fraction:.0%} malformed ({', '.join(r.kind for r in bad)})",
            flush=True,
        )
        if server_pid is None:
            print("memory not measured: give --server-pid (or use --local)", flush=True)
        baseline: list[MemorySnapshot] = []
        readings = MemoryReadings()  # after the warm-up, every --sample-every seconds, then at the end
        samples: list[list[float]] = []  # the printed progress lines' readings, for the JSON summary
        next_print = args.print_every

        def take_baseline() -> None:
            if server_pid is not None:
                baseline.append(MemorySnapshot.of(server_pid))
                readings.add(baseline[0], server_pid)

        def take_sample(tally: Tally) -> None:
            nonlocal next_print
            elapsed_s = round(time.monotonic() - started, 1)
            printing = elapsed_s >= next_print
            reading = None
            if server_pid is not None and (printing or baseline):
                # nvidia-smi only for the printed lines: it takes tens of ms on the event loop
                reading = MemorySnapshot.of(server_pid, with_gpu=printing)
                if baseline:
                    readings.add(reading, server_pid)
            if not printing:
                return
            next_print += args.print_every
            counts = f"sent {tally.sent}, wrong {tally.count('wrong')}, lost {tally.count('lost')}"
            if reading is None:
                tqdm.write(f"[{elapsed_s:7.1f} s] {counts}")
                return
            gpu = None if reading.gpu_total is None else round(reading.gpu_total / MIB, 1)
            samples.append([elapsed_s, round(reading.rss_total / MIB, 1), *([] if gpu is None else [gpu])])
            tqdm.write(
                f"[{elapsed_s:7.1f} s] {counts}; tritonserver + stubs RSS {reading.rss_total / MIB:.1f} MiB"
                + ("" if gpu is None else f", GPU {gpu} MiB")
            )

        started = time.monotonic()
        tally = asyncio.run(
            run_soak(
                settings,
                http_url,
                grpc_url,
                good,
                bad,
                on_warm=take_baseline,
                sample=take_sample,
                sample_every_s=args.sample_every,
            )
        )
        elapsed = time.monotonic() - started
        end = MemorySnapshot.of(server_pid) if server_pid is not None else None
        if end is not None and server_pid is not None and baseline:
            readings.add(end, server_pid)
        ready = bool(client.is_server_ready()) and bool(client.is_model_ready(args.model))
    summary = summarise(tally, elapsed, baseline[0] if baseline else None, end, readings, ready, args)
    summary["host"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    summary["memory_samples"] = {"columns": ["elapsed_s", "rss_mib", "gpu_mib"], "rows": samples}
    _print_summary(summary)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
