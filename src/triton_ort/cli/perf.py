"""`triton-ort perf`: latency and throughput of any model a Triton server serves, in perf_analyzer's way.

    triton-ort perf my_model                                   # HTTP, 127.0.0.1:8000, concurrency 1
    triton-ort perf my_model -i grpc --concurrency 1 2 4 8 16 --json perf.json --csv perf.csv --plot perf.svg
    triton-ort perf bert --shape input_ids:128 --shape attention_mask:128 -b 8   # open axes: say their size
    triton-ort perf my_model --inputs real.npz                 # a request's tensors by name, batch first
    triton-ort perf my_model --cuda-shm                        # GPU hosts: inputs and outputs in CUDA shm
    triton-ort perf my_model --compare-native                  # and my_model_native, served by "onnxruntime"

Inputs come from the model's metadata and config: random data of each input's type and shape, strings
included; optional inputs are left out unless --shape or --inputs gives them. Load is closed-loop: at
concurrency N, N requests are in flight, each sent again as soon as its answer arrives (one asyncio loop,
tritonclient's async HTTP or gRPC client). Each point is measured in windows of --measurement-interval
ms until the last 3 windows agree within --stability-percentage on throughput and mean latency (at most
--max-windows); the figures are those 3 windows': p50/p90/p95/p99 latency, requests and inferences per
second, and Triton's own stages (queue, compute input, compute infer, compute output) from its statistics
over the same windows. Every answer is checked against the model's metadata (each output's datatype and
shape, and its byte count); a wrong one stops the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import sys
import time
import urllib.request
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from triton_ort.cli.request_checks import ModelSignature, RequestError
from triton_ort.cli.request_data import (
    INPUT_DATA_MODES,
    add_request_data_options,
    check_range_names,
    generated,
    parse_ranges_option,
    read_json_input_data,
    sized_by_shape,
)
from triton_ort.harness.transport import (
    PROTOCOLS,
    STAGES,
    ModelStatistics,
    make_client,
    model_config,
    model_metadata,
    tensor_metas,
)
from triton_ort.model.input_ranges import ValueRange, describe, value_ranges

DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}
STABLE_WINDOWS = 3
"""How many of the last windows must agree, as perf_analyzer's stability check has it."""
NATIVE_SUFFIX = "_native"
CLIENT_BUSY = 0.9
"""Client CPU (cores) above which a point may be limited by the client rather than the server."""
MAX_IN_FLIGHT = 64
"""--request-rate: the most requests in flight at once (one set of CUDA shared-memory regions each); a
server that falls this far behind the rate is reported, not chased."""


class PerfError(RuntimeError):
    """A run that could not go on: a refused request, a wrong answer; one line."""


# --- the requests ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputSpec:
    """What an answer's output must look like: Triton's datatype and the shape with the batch filled in
    (-1 where the model's axis is open)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class SeenOutput:
    """An output as an answer declares it; `nbytes` the bytes that came with it (None: in shared memory,
    or not known)."""

    datatype: str
    shape: tuple[int, ...]
    nbytes: int | None = None


def expected_outputs(metadata: Mapping[str, Any], batch: int, batched: bool) -> list[OutputSpec]:
    specs = []
    for meta in tensor_metas(metadata, "outputs"):
        shape = tuple(batch if (batched and axis == 0) else d for axis, d in enumerate(meta.shape))
        specs.append(OutputSpec(meta.name, meta.datatype, shape))
    return specs


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) if d >= 0 else "any" for d in shape) + "]"


def check_answer(expected: Sequence[OutputSpec], seen: Mapping[str, SeenOutput]) -> list[str]:
    """What is wrong with an answer, in words (empty: nothing): an output missing or unasked for, another
    datatype, another shape, or a byte count that does not match its shape."""
    problems = []
    for spec in expected:
        got = seen.get(spec.name)
        if got is None:
            problems.append(f"output {spec.name!r} missing")
            continue
        if got.datatype != spec.datatype:
            problems.append(f"output {spec.name!r}: datatype {got.datatype}, expected {spec.datatype}")
        fits = len(got.shape) == len(spec.shape) and all(
            e < 0 or e == g for e, g in zip(spec.shape, got.shape, strict=True)
        )
        if not fits:
            problems.append(
                f"output {spec.name!r}: shape {list(got.shape)}, expected {_shape_text(spec.shape)}"
            )
        elif got.nbytes is not None and got.datatype == spec.datatype and spec.datatype != "BYTES":
            size = int(np.prod(got.shape)) * np.dtype(triton_to_np_dtype(spec.datatype)).itemsize
            if got.nbytes != size:
                problems.append(
                    f"output {spec.name!r}: {got.nbytes} bytes for shape {list(got.shape)}, expected {size}"
                )
    names = {spec.name for spec in expected}
    problems += [f"output {name!r}: not an output of the model" for name in seen if name not in names]
    return problems


def seen_outputs(result: Any, in_shared_memory: bool = False) -> dict[str, SeenOutput]:
    """The outputs an InferResult (HTTP or gRPC, sync or async) declares, without decoding their data.
    `in_shared_memory`: the outputs were requested into shared-memory regions (--cuda-shm); their bytes
    are in the regions, so only datatype and shape can be checked (gRPC answers each with empty contents
    and no parameter that says so)."""
    response = result.get_response()
    if isinstance(response, dict):  # HTTP: JSON header, binary data after it
        return {
            out["name"]: SeenOutput(
                out["datatype"],
                tuple(int(d) for d in out["shape"]),
                None if in_shared_memory else out.get("parameters", {}).get("binary_data_size"),
            )
            for out in response.get("outputs", [])
        }
    raw = list(response.raw_output_contents)
    known = not in_shared_memory and len(raw) == len(response.outputs)
    return {
        out.name: SeenOutput(out.datatype, tuple(int(d) for d in out.shape), len(raw[i]) if known else None)
        for i, out in enumerate(response.outputs)
    }


def _strings(shape: tuple[int, ...], rng: np.random.Generator, text: str | None) -> NDArray[Any]:
    """A BYTES input: --string-data everywhere, or random lowercase words of 8 letters."""
    count = int(np.prod(shape))
    if text is not None:
        words = [text.encode()] * count
    else:
        letters = rng.integers(ord("a"), ord("z") + 1, (count, 8), dtype=np.uint8)
        words = [row.tobytes() for row in letters]
    array = np.empty(count, dtype=object)
    array[:] = words
    return array.reshape(shape)


def _read_npz(path: Path) -> dict[str, NDArray[Any]]:
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise RequestError(f"--inputs {path}: cannot read it as an .npz of arrays ({error})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise RequestError(f"--inputs {path}: one array (.npy); expected an .npz of inputs by name")
    with archive:
        arrays = dict(archive)
    # np.savez writes Python strings as unicode arrays; a BYTES input is sent as UTF-8 bytes
    return {
        name: np.vectorize(str.encode, otypes=[object])(array) if array.dtype.kind == "U" else array
        for name, array in arrays.items()
    }


def build_requests(
    signature: ModelSignature,
    metadata: Mapping[str, Any],
    batch: int | None,
    shapes: Sequence[str] = (),
    npz: Path | None = None,
    string_data: str | None = None,
    seed: int = 0,
    input_data: str = "random",
    ranges: Mapping[str, ValueRange] | None = None,
) -> tuple[list[dict[str, NDArray[Any]]], int]:
    """The requests to send in turn, and their batch. The first: --inputs (or --input-data FILE) arrays as
    given, --shape inputs and every other required input made up (random or zero; integers within
    `ranges`, request_data), optional ones left out, all checked against the model's config. perf_analyzer's
    JSON input data (--input-data FILE.json) gives one request per entry: each later entry replaces the
    arrays it gives in the first, all of one batch. The file is read once."""
    metas = {meta.name: meta for meta in tensor_metas(metadata, "inputs")}
    batched = signature.max_batch_size > 0
    given = _read_npz(npz) if npz else {}
    source = f"--inputs {npz}"
    later: list[dict[str, NDArray[Any]]] = []  # the JSON file's later entries
    if input_data not in INPUT_DATA_MODES:
        path = Path(input_data)
        datatypes = {name: meta.datatype for name, meta in metas.items()}
        if path.suffix == ".json":
            more, *later = read_json_input_data(path, datatypes)
        else:
            more = _read_npz(path)
        if set(more) & set(given):
            raise RequestError(
                f"--input-data {input_data} and --inputs {npz} both give {sorted(set(more) & set(given))}"
            )
        given.update(more)
        source = f"--input-data {input_data}"
    if given:
        rows = signature.check_inputs(given)  # names, dtypes, shapes; the batch is their first axis
        if batch is not None and batch != rows:
            raise RequestError(
                f"-b {batch} with {source}: its arrays' batch (first axis) is {rows}; leave -b out"
            )
        batch = rows
    where = "the batch -b gives" if not given else f"{source}'s first axis"
    dims, batch, _ = sized_by_shape(shapes, signature.model, metas, given, source, batched, batch, where)
    batch = 1 if batch is None else batch
    signature.check_batch(batch, "-b {}")
    rng = np.random.default_rng(seed)
    mode = input_data if input_data in INPUT_DATA_MODES else "random"
    inputs: dict[str, NDArray[Any]] = {}
    for name, meta in metas.items():
        if name in given:
            inputs[name] = given[name]
            continue
        own = meta.shape[1:] if batched else meta.shape
        if name in dims:
            shape = dims[name]
        elif name in signature.optional_inputs:
            continue  # the model's own default applies
        elif any(d < 0 for d in own):
            example = ",".join(str(d) if d >= 0 else "16" for d in own)
            raise RequestError(
                f"input {name!r} has open axes {_shape_text(own)} (without the batch axis): give their size "
                f"with --shape {name}:{example} (for example), or the data in --inputs FILE.npz"
            )
        else:
            shape = own
        full = (batch, *shape) if batched else shape
        if meta.datatype == "BYTES":
            inputs[name] = _strings(full, rng, string_data)
        else:
            inputs[name] = generated(meta.datatype, full, rng, mode, (ranges or {}).get(name))
    signature.check_inputs(inputs)
    requests = [inputs]
    for index, entry in enumerate(later, start=1):
        request = {**inputs, **entry}
        if signature.check_inputs(request) != batch:
            raise RequestError(
                f"--input-data {input_data}: data[{index}] is not of the first entry's batch {batch}"
            )
        requests.append(request)
    return requests, batch


# --- windows and stability -------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """One measurement window: the latencies (s) of the requests that ended in it, its length (s), the
    client's CPU time in it (s), and the server's statistics at its end."""

    latencies: tuple[float, ...]
    seconds: float
    client_cpu_s: float = 0.0
    statistics: ModelStatistics | None = None
    gpu: GpuReading | None = None

    @property
    def requests_per_s(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds > 0 else 0.0

    @property
    def mean_latency(self) -> float:
        return sum(self.latencies) / len(self.latencies) if self.latencies else 0.0

    def latency(self, percentile: float | None) -> float:
        """The window's latency as the run judges it: the mean, or the given percentile (s)."""
        if percentile is None or not self.latencies:
            return self.mean_latency
        return float(np.percentile(self.latencies, percentile))


@dataclass(frozen=True)
class GpuReading:
    """The server's GPUs at a window's end, from Triton's metrics endpoint: utilisation (0-1, averaged
    over the GPUs; Triton samples it every --metrics-interval-ms) and memory used (bytes, summed)."""

    utilization: float
    memory_used_bytes: float


def gpu_reading(metrics_text: str) -> GpuReading | None:
    """nv_gpu_utilization and nv_gpu_memory_used_bytes from a scrape; None where the server has no GPU
    metrics (a CPU host, or --allow-gpu-metrics=false)."""
    values: dict[str, list[float]] = {"nv_gpu_utilization": [], "nv_gpu_memory_used_bytes": []}
    for line in metrics_text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in values:
            with contextlib.suppress(ValueError, IndexError):
                values[name].append(float(line.rsplit(" ", 1)[1]))
    utilization, memory = values["nv_gpu_utilization"], values["nv_gpu_memory_used_bytes"]
    if not utilization and not memory:
        return None
    return GpuReading(sum(utilization) / len(utilization) if utilization else 0.0, sum(memory))


def stable(
    windows: Sequence[Window], percentage: float, count: int = STABLE_WINDOWS, percentile: float | None = None
) -> bool:
    """perf_analyzer's rule: the last `count` windows each within ±percentage % of their mean, both in
    throughput and in latency (the mean, or --percentile's); a window with no answer is never stable."""
    if len(windows) < count:
        return False
    last = windows[-count:]
    if any(not window.latencies for window in last):
        return False
    for values in ([w.requests_per_s for w in last], [w.latency(percentile) for w in last]):
        mean = sum(values) / count
        if any(abs(value - mean) > mean * percentage / 100 for value in values):
            return False
    return True


@dataclass
class Point:
    """One model at one concurrency, from the last STABLE_WINDOWS windows (or fewer, if fewer ran)."""

    model: str
    concurrency: int
    batch: int
    requests: int
    seconds: float
    requests_per_s: float
    infer_per_s: float
    avg_us: float
    p50_us: float
    p90_us: float
    p95_us: float
    p99_us: float
    windows: int
    stable: bool
    client_cpu: float
    """The client process's CPU time over the windows, in cores (1.0: one core busy all the time)."""
    server_us: dict[str, float] = field(default_factory=dict)
    """Triton's stages (STAGES), mean µs per request over the same windows."""
    server_requests: int = 0
    percentile: float | None = None
    """--percentile: the latency the run judges stability, the threshold and rankings by (None: the mean)."""
    latency_us: float = 0.0
    """That latency over the windows: avg_us, or the percentile's."""
    gpu_utilization: float | None = None
    """The server's GPU utilisation over the windows (0-1, mean of the windows' readings); None: no GPU
    metrics."""
    gpu_memory_mib: float | None = None
    """The most GPU memory in use at a window's end over the windows (MiB, all the server's GPUs)."""
    request_rate: float | None = None
    """--request-rate: the rate the requests were sent at (open loop; `concurrency` is then the most
    requests that were in flight at once)."""

    @property
    def load(self) -> str:
        """The point's load: c=N (closed loop), or r=R (requests per second)."""
        return f"r={self.request_rate:g}" if self.request_rate is not None else f"c={self.concurrency}"


def summarize(
    model: str,
    concurrency: int,
    batch: int,
    windows: Sequence[Window],
    before: ModelStatistics | None,
    percentage: float,
    percentile: float | None = None,
) -> Point:
    """A point from its windows; `before`: the statistics at the start of the first window."""
    used = list(windows[-STABLE_WINDOWS:])
    start = windows[-len(used) - 1].statistics if len(windows) > len(used) else before
    latencies = np.array([latency for window in used for latency in window.latencies]) * 1e6
    seconds = sum(window.seconds for window in used)
    requests = len(latencies)
    p50, p90, p95, p99 = (float(np.percentile(latencies, q)) if requests else 0.0 for q in (50, 90, 95, 99))
    end = used[-1].statistics if used else None
    server = end.stage_us(start) if end and start else {}
    server_requests = end.requests - start.requests if end and start else 0
    rate = requests / seconds if seconds else 0.0
    gpu = [window.gpu for window in used if window.gpu is not None]
    average = float(latencies.mean()) if requests else 0.0
    return Point(
        model=model,
        concurrency=concurrency,
        batch=batch,
        requests=requests,
        seconds=seconds,
        requests_per_s=rate,
        infer_per_s=rate * batch,
        avg_us=average,
        p50_us=p50,
        p90_us=p90,
        p95_us=p95,
        p99_us=p99,
        windows=len(windows),
        stable=stable(windows, percentage, percentile=percentile),
        client_cpu=sum(window.client_cpu_s for window in used) / seconds if seconds else 0.0,
        server_us=server,
        server_requests=server_requests,
        percentile=percentile,
        latency_us=float(np.percentile(latencies, percentile)) if percentile and requests else average,
        gpu_utilization=sum(g.utilization for g in gpu) / len(gpu) if gpu else None,
        gpu_memory_mib=max(g.memory_used_bytes for g in gpu) / (1 << 20) if gpu else None,
    )


# --- the load -----------------------------------------------------------------------------------------


@dataclass
class Target:
    """A served model and what its answers must look like."""

    name: str
    expected: list[OutputSpec]


class Progress:
    """A tqdm bar per point on a terminal (tqdm is optional); one line per window elsewhere, so that a
    log shows the run moving."""

    def __init__(self, total: int, label: str) -> None:
        self.label = label
        self.bar: Any = None
        if sys.stderr.isatty():
            with contextlib.suppress(ImportError):
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=label, unit=" windows", leave=False, file=sys.stderr)

    def window(self, number: int, window: Window, is_stable: bool) -> None:
        text = f"{window.requests_per_s:.1f} req/s, mean {window.mean_latency * 1e3:.3f} ms"
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update()
        else:
            state = "stable" if is_stable else "measuring"
            print(f"{self.label}: window {number}: {text} ({state})", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Load:
    """The async client of one protocol, and the request tensors of each concurrency slot (one set with
    numpy in the body, or one set of CUDA shared-memory regions per slot)."""

    def __init__(
        self,
        protocol: str,
        url: str,
        slots: list[tuple[list[Any], list[Any]]],
        concurrency: int,
        outputs_in_shared_memory: bool = False,
        metrics_url: str | None = None,
        requests: list[dict[str, NDArray[Any]]] | None = None,
    ) -> None:
        self.metrics_url = metrics_url
        self.child_cpu_s = 0.0  # CPU time of --client-processes' processes, reported as they go
        self.requests = requests or []  # the requests' arrays: what --client-processes' processes send
        self.turn = 0  # requests in the body take the slots in turn (several JSON input-data requests)
        # shared memory: `concurrency` slots of region sets, each slot one set per request (request_slots)
        self.slots_are_regions = outputs_in_shared_memory
        self.sets_per_slot = max(1, len(slots) // concurrency)
        self.turns: dict[int, int] = {}  # the requests each slot has sent, with region sets
        self.protocol = protocol
        self.outputs_in_shared_memory = outputs_in_shared_memory
        self.url = url
        self.slots = slots
        self.concurrency = concurrency
        self.client: Any = None

    async def __aenter__(self) -> Load:
        if self.protocol == "grpc":
            import tritonclient.grpc.aio as grpc_aio

            self.client = grpc_aio.InferenceServerClient(self.url)
        else:
            import tritonclient.http.aio as http_aio

            # a connection per request in flight, and one for the statistics (aiohttp's default is 100)
            self.client = http_aio.InferenceServerClient(self.url, conn_limit=max(100, self.concurrency + 1))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()

    async def statistics(self, model: str) -> ModelStatistics:
        if self.protocol == "grpc":
            reply = await self.client.get_inference_statistics(model, as_json=True)
        else:
            reply = await self.client.get_inference_statistics(model)
        return ModelStatistics.from_reply(reply)

    async def gpu(self) -> GpuReading | None:
        """The server's GPUs now (Triton's metrics endpoint); None without one, or without GPU metrics."""
        if self.metrics_url is None:
            return None

        def scrape() -> str:
            with urllib.request.urlopen(f"http://{self.metrics_url}/metrics", timeout=5) as reply:
                return str(reply.read().decode())

        try:
            return gpu_reading(await asyncio.to_thread(scrape))
        except OSError as error:
            note(f"metrics {self.metrics_url}: unreachable ({error}); no GPU figures (--metrics-url)")
            self.metrics_url = None
            return None

    async def ask(self, target: Target, slot: int) -> float:
        """One request on a slot's tensors; its latency (s). A refusal or a wrong answer raises PerfError."""
        if self.slots_are_regions:  # a slot's own region sets, one per request, taken in turn
            turn = self.turns.get(slot, 0)
            self.turns[slot] = turn + 1
            index = slot * self.sets_per_slot + turn % self.sets_per_slot
        else:  # the body's requests in turn, whichever slot sends
            index, self.turn = self.turn, self.turn + 1
        inputs, outputs = self.slots[index % len(self.slots)]
        started = time.perf_counter()
        try:
            result = await self.client.infer(target.name, inputs, outputs=outputs)
        except InferenceServerException as error:
            raise PerfError(f"model {target.name!r} refused a request: {_one_line(error)}") from None
        latency = time.perf_counter() - started
        problems = check_answer(target.expected, seen_outputs(result, self.outputs_in_shared_memory))
        if problems:
            raise PerfError(f"wrong answer from model {target.name!r}: {'; '.join(problems)}")
        return latency

    async def point(self, target: Target, concurrency: int, batch: int, args: argparse.Namespace) -> Point:
        """Closed-loop load at `concurrency` in windows until stable (or --max-windows)."""
        await self.ask(target, 0)  # the first answer is checked before anything is timed
        processes = min(getattr(args, "client_processes", 1), concurrency)
        if processes > 1:
            assert self.requests, "--client-processes: Load was given no requests to send"
            return await self._point_in_processes(target, concurrency, batch, args, processes)

        async def drive(latencies: list[float], stopping: asyncio.Event) -> None:
            async def worker(slot: int) -> None:
                while not stopping.is_set():
                    latencies.append(await self.ask(target, slot))

            await asyncio.gather(*(worker(slot) for slot in range(concurrency)))

        point = await self._windows(target, f"c={concurrency}", drive, batch, args)
        return replace(point, concurrency=concurrency)

    async def _point_in_processes(
        self, target: Target, concurrency: int, batch: int, args: argparse.Namespace, processes: int
    ) -> Point:
        """The same closed loop, its requests sent from `processes` client processes (one asyncio client
        each, the concurrency split between them): one Python process tops out below a fast server."""
        shares = [concurrency // processes + (i < concurrency % processes) for i in range(processes)]
        spec = {
            "protocol": self.protocol,
            "url": self.url,
            "shared_memory": getattr(args, "shared_memory", "none"),
            "requests": self.requests,
            "target": target,
        }
        with ClientProcesses(spec, shares) as pool:

            async def drive(latencies: list[float], stopping: asyncio.Event) -> None:
                while not stopping.is_set():
                    self.child_cpu_s += pool.collect(latencies)
                    await asyncio.sleep(0.02)

            point = await self._windows(target, f"c={concurrency}", drive, batch, args)
        return replace(point, concurrency=concurrency)

    async def point_at_rate(self, target: Target, rate: float, batch: int, args: argparse.Namespace) -> Point:
        """Open-loop load: a request every 1/rate s (or at Poisson arrivals, --distribution poisson), each
        sent whether or not the earlier ones were answered, at most one per slot in flight: when every slot
        is busy the next request waits (the point then says how many did)."""
        await self.ask(target, 0)
        slots = self.concurrency if self.slots_are_regions else MAX_IN_FLIGHT  # a region set's slots
        most, late = 0, 0

        async def drive(latencies: list[float], stopping: asyncio.Event) -> None:
            nonlocal most, late
            rng = np.random.default_rng(args.seed)
            free = list(range(slots))
            in_flight: set[asyncio.Task[None]] = set()

            async def one(slot: int) -> None:
                try:
                    latencies.append(await self.ask(target, slot))
                finally:
                    free.append(slot)

            due = time.perf_counter()
            while not stopping.is_set():
                due += rng.exponential(1 / rate) if args.distribution == "poisson" else 1 / rate
                wait = due - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not free:
                    late += 1
                    done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        task.result()
                task = asyncio.create_task(one(free.pop()))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                most = max(most, len(in_flight))
                for task in [t for t in in_flight if t.done()]:
                    task.result()  # a refused request or a wrong answer: raised here
            await asyncio.gather(*in_flight)

        point = await self._windows(target, f"r={rate:g}", drive, batch, args)
        if late:
            note(
                f"{target.name} r={rate:g}: {late} requests were sent late, every one of {slots} slots being "
                "in flight: the server does not keep up with this rate"
            )
        return replace(point, concurrency=most, request_rate=rate)

    async def _windows(
        self,
        target: Target,
        load: str,
        drive: Callable[[list[float], asyncio.Event], Coroutine[Any, Any, None]],
        batch: int,
        args: argparse.Namespace,
    ) -> Point:
        """Run `drive` (which appends each answer's latency) in windows until stable (or --max-windows)."""
        latencies: list[float] = []
        stopping = asyncio.Event()
        progress = Progress(args.max_windows, f"{target.name} {load}")
        windows: list[Window] = []
        before = await self.statistics(target.name)
        driver = asyncio.create_task(drive(latencies, stopping))
        try:
            seen, started, cpu = 0, time.perf_counter(), time.process_time() + self.child_cpu_s
            while len(windows) < args.max_windows:
                done, _ = await asyncio.wait([driver], timeout=args.measurement_interval / 1e3)
                for task in done:
                    task.result()  # a refused request or a wrong answer: raised here
                now, count = time.perf_counter(), len(latencies)
                cpu_now = time.process_time() + self.child_cpu_s
                statistics = await self.statistics(target.name)
                gpu = await self.gpu()
                window = Window(tuple(latencies[seen:count]), now - started, cpu_now - cpu, statistics, gpu)
                windows.append(window)
                seen, started, cpu = count, now, cpu_now
                is_stable = stable(windows, args.stability_percentage, percentile=args.percentile)
                progress.window(len(windows), windows[-1], is_stable)
                if is_stable:
                    break
        finally:
            progress.close()
            stopping.set()  # each request in flight ends first: regions are not left in use
            await asyncio.wait([driver], timeout=max(30.0, 3 * args.measurement_interval / 1e3))
            driver.cancel()
            await asyncio.gather(driver, return_exceptions=True)
        point = summarize(target.name, 0, batch, windows, before, args.stability_percentage, args.percentile)
        if not point.stable:
            note(
                f"{target.name} {load}: not stable within {args.max_windows} windows "
                f"(±{args.stability_percentage:g} %); the figures are the last {STABLE_WINDOWS} windows'. "
                "Longer windows (--measurement-interval) or more of them (--max-windows) may settle it"
            )
        if point.client_cpu >= CLIENT_BUSY:
            note(
                f"{target.name} {load}: the client used {point.client_cpu:.2f} of a CPU core: this "
                "point may measure the client more than the server"
            )
        return point


class ClientProcesses:
    """--client-processes: child processes that each run a closed loop over their share of the
    concurrency and stream their answers' latencies (and their CPU time) back every 50 ms. They are stopped
    at the end of the point, on an error, and when this process dies (a child whose pipe breaks stops)."""

    def __init__(self, spec: dict[str, Any], shares: Sequence[int]) -> None:
        self.spec = spec
        self.shares = [share for share in shares if share > 0]
        self.pipes: list[Any] = []
        self.processes: list[Any] = []

    def __enter__(self) -> ClientProcesses:
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # no fork of an asyncio loop and its sockets
        try:
            for share in self.shares:
                mine, theirs = context.Pipe()
                process = context.Process(
                    target=_client_process, args=(theirs, self.spec, share), daemon=True
                )
                process.start()
                theirs.close()
                self.pipes.append(mine)
                self.processes.append(process)
            for pipe in self.pipes:  # each has checked an answer before anything is timed
                if not pipe.poll(120):
                    raise PerfError("a client process did not start within 120 s")
                kind, payload = pipe.recv()
                if kind == "error":
                    raise PerfError(payload)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def collect(self, latencies: list[float]) -> float:
        """Append what the processes measured since the last call; their CPU time (s) over it."""
        cpu = 0.0
        for pipe in self.pipes:
            while pipe.poll():
                kind, payload = pipe.recv()
                if kind == "error":
                    raise PerfError(payload)
                latencies.extend(payload[0])
                cpu += payload[1]
        return cpu

    def __exit__(self, *exc: object) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send("stop")
        for process in self.processes:
            process.join(30)
            if process.is_alive():
                process.kill()
                process.join(5)
        for pipe in self.pipes:
            pipe.close()
        self.pipes, self.processes = [], []


def _client_process(pipe: Any, spec: dict[str, Any], concurrency: int) -> None:
    """One client process of --client-processes (see ClientProcesses)."""
    target: Target = spec["target"]
    args = argparse.Namespace(
        protocol=spec["protocol"], url=spec["url"], shared_memory=spec["shared_memory"], cuda_shm=False
    )

    async def run() -> None:
        latencies: list[float] = []
        stopping = asyncio.Event()
        with request_slots(args, spec["requests"], target.expected, concurrency) as slots:
            shared = args.shared_memory != "none"
            async with Load(args.protocol, args.url, slots, concurrency, shared) as load:
                await load.ask(target, 0)
                pipe.send(("ready", None))

                async def worker(slot: int) -> None:
                    while not stopping.is_set():
                        latencies.append(await load.ask(target, slot))

                workers = [asyncio.create_task(worker(slot)) for slot in range(concurrency)]
                sent, cpu = 0, time.process_time()
                try:
                    while not pipe.poll():
                        done, _ = await asyncio.wait(
                            workers, timeout=0.05, return_when=asyncio.FIRST_EXCEPTION
                        )
                        for task in done:
                            task.result()
                        now = time.process_time()
                        pipe.send(("latencies", (latencies[sent:], now - cpu)))
                        sent, cpu = len(latencies), now
                finally:
                    stopping.set()
                    await asyncio.gather(*workers, return_exceptions=True)

    try:
        asyncio.run(run())
    except (BrokenPipeError, EOFError):
        return  # the parent has gone
    except Exception as error:
        with contextlib.suppress(OSError):
            pipe.send(("error", f"client process: {error}"))


@contextlib.contextmanager
def request_slots(
    args: argparse.Namespace,
    requests: dict[str, NDArray[Any]] | list[dict[str, NDArray[Any]]],
    expected: list[OutputSpec],
    count: int,
) -> Iterator[list[tuple[list[Any], list[Any]]]]:
    """The request tensors: numpy in the body (a slot per request, which Load.ask takes in turn, whatever
    the concurrency), or with --shared-memory, for each of `count` slots, a set of registered regions per
    request (its own outputs; CUDA or system shared memory; slot-major: slot k's are k*R ... k*R+R-1 for R
    requests, which Load.ask takes in turn), removed at the end."""
    module = PROTOCOLS[args.protocol]
    kind = args.shared_memory
    requests = [requests] if isinstance(requests, dict) else requests
    if kind == "none":
        slots = []
        for inputs in requests:  # one slot per request, sent in turn (Load.ask)
            items = []
            for name, array in inputs.items():
                item = module.InferInput(name, list(array.shape), _wire_type(array))
                item.set_data_from_numpy(array)
                items.append(item)
            slots.append((items, [module.InferRequestedOutput(spec.name) for spec in expected]))
        yield slots
        return
    option = "--cuda-shm" if getattr(args, "cuda_shm", False) else f"--shared-memory {kind}"  # as typed
    strings = [name for inputs in requests for name, array in inputs.items() if array.dtype.kind in "OSU"]
    if strings:
        raise RequestError(f"{option}: input {strings[0]!r} holds strings; shared memory takes numbers")
    layout = {}
    for spec in expected:
        if spec.datatype == "BYTES" or any(d < 0 for d in spec.shape):
            raise RequestError(
                f"{option} needs outputs of fixed shape and number type; {spec.name!r} is "
                f"{spec.datatype}{_shape_text(spec.shape)}"
            )
        layout[spec.name] = (np.dtype(triton_to_np_dtype(spec.datatype)), spec.shape)
    client = make_client(args.protocol, args.url)
    with contextlib.ExitStack() as stack:
        if kind == "system":
            from tritonclient.utils.shared_memory import SharedMemoryException

            from triton_ort.cli.cuda_shm import SystemShmIO

            try:
                system = [
                    stack.enter_context(SystemShmIO(client, "", inputs, layout))
                    for _ in range(count)
                    for inputs in requests
                ]
            except SharedMemoryException as error:  # e.g. out of file descriptors: a region holds one
                raise RequestError(
                    f"{option}: {count} slots x {len(requests)} requests' regions could not be made "
                    f"({_one_line(error)}); send fewer requests in the input data, or at a lower load"
                ) from None
            yield [(region.infer_inputs, region.requested_outputs) for region in system]
            return
        try:
            from tritonclient.utils.cuda_shared_memory import CudaSharedMemoryException

            from triton_ort.cli.cuda_shm import CudaShmIO
        except ImportError as error:  # tritonclient imports cuda.bindings for it: not on CPU hosts
            raise RequestError(
                f"{option} needs a CUDA GPU and cuda-bindings on this host ({error})"
            ) from None
        try:
            regions = [
                stack.enter_context(CudaShmIO(client, "", inputs, layout))
                for _ in range(count)
                for inputs in requests
            ]
        except CudaSharedMemoryException as error:
            raise RequestError(f"{option} needs a CUDA GPU on this host: {_one_line(error)}") from None
        yield [(region.infer_inputs, region.requested_outputs) for region in regions]


def _wire_type(array: NDArray[Any]) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return "BYTES" if array.dtype.kind in "OSU" else str(np_to_triton_dtype(array.dtype))


# --- the native backend beside ours ---------------------------------------------------------------------


def _index(client: Any) -> list[dict[str, Any]]:
    if isinstance(client, PROTOCOLS["grpc"].InferenceServerClient):
        reply = client.get_model_repository_index(as_json=True)
        return list(reply.get("models", [])) if isinstance(reply, dict) else []
    return list(client.get_model_repository_index())


def native_twin(client: Any, name: str) -> tuple[bool, bool, str]:
    """Whether the twin `name` (the same model.onnx with backend "onnxruntime") is ready to measure,
    whether this run loaded it (explicit model control: then it unloads it too), and otherwise the one
    line that says why it is skipped."""
    entry = next((e for e in _index(client) if e.get("name") == name), None)
    if entry is None:
        return (
            False,
            False,
            f"native onnxruntime backend: skipped, the server has no model {name!r} (serve your model.onnx "
            'under that name with backend: "onnxruntime" beside yours; docs/benchmarks.md)',
        )
    if entry.get("state") == "READY":
        return True, False, ""
    reason = str(entry.get("reason", ""))
    if not reason:  # in the repository, not loaded: explicit model control lets us load it
        try:
            client.load_model(name)
            return True, True, ""
        except InferenceServerException as error:
            entry = next((e for e in _index(client) if e.get("name") == name), {})
            reason = str(entry.get("reason", "")) or _one_line(error)
    if "libtriton_onnxruntime" in reason or "backend" in reason.lower():
        return False, False, f"native onnxruntime backend: not installed on this server, skipped ({reason})"
    return False, False, f"native onnxruntime backend: model {name!r} is not ready, skipped ({reason})"


# --- reports ------------------------------------------------------------------------------------------


def table(points: Sequence[Point]) -> str:
    rated = any(p.request_rate is not None for p in points)
    header = [
        "model",
        "rate" if rated else "conc",
        "batch",
        "n",
        "infer/s",
        "p50 ms",
        "p90 ms",
        "p95 ms",
        "p99 ms",
    ]
    chosen = next((p.percentile for p in points if p.percentile is not None), None)
    if chosen in (50, 90, 95, 99):  # already a column of its own
        chosen = None
    if chosen is not None:
        header.append(f"p{chosen:g} ms")
    gpu = any(p.gpu_utilization is not None for p in points)
    if gpu:
        header += ["gpu util %", "gpu MiB"]
    header += ["server us (queue/in/infer/out)", "stable"]
    rows = [
        [
            p.model,
            p.load.removeprefix("c="),
            str(p.batch),
            str(p.requests),
            f"{p.infer_per_s:.1f}",
            *(f"{v / 1e3:.3f}" for v in (p.p50_us, p.p90_us, p.p95_us, p.p99_us)),
            *([f"{p.latency_us / 1e3:.3f}"] if chosen is not None else []),
            *([f"{100 * (p.gpu_utilization or 0):.0f}", f"{p.gpu_memory_mib or 0:.0f}"] if gpu else []),
            "/".join(f"{p.server_us.get(s, 0.0):.0f}" for s in STAGES) if p.server_us else "-",
            "yes" if p.stable else "no",
        ]
        for p in points
    ]
    numeric = len(header) - 2
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.rjust(w) if 0 < i < numeric else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in (header, ["-" * w for w in widths], *rows)
    ]
    return "\n".join(lines)


def ratios(points: Sequence[Point], ours: str, native: str) -> list[str]:
    """native / ours at each concurrency both were measured at."""
    lines = []
    for mine in (p for p in points if p.model == ours):
        theirs = next((p for p in points if p.model == native and p.load == mine.load), None)
        if theirs and mine.p50_us and mine.infer_per_s:
            lines.append(
                f"native onnxruntime / {ours} at {mine.load}: "
                f"p50 {theirs.p50_us / mine.p50_us:.2f}x, "
                f"throughput {theirs.infer_per_s / mine.infer_per_s:.2f}x"
            )
    return lines


CSV_FIELDS = [
    "model",
    "concurrency",
    "batch",
    "requests",
    "infer_per_s",
    "requests_per_s",
    "avg_us",
    "p50_us",
    "p90_us",
    "p95_us",
    "p99_us",
    *(f"server_{stage}_us" for stage in STAGES),
    "windows",
    "stable",
    "client_cpu",
    "request_rate",
    "percentile",
    "latency_us",
    "gpu_utilization",
    "gpu_memory_mib",
]


def csv_rows(points: Sequence[Point]) -> list[dict[str, Any]]:
    rows = []
    for point in points:
        row = {key: value for key, value in asdict(point).items() if key in CSV_FIELDS}
        row |= {f"server_{stage}_us": point.server_us.get(stage, "") for stage in STAGES}
        rows.append(row)
    return rows


def write_reports(args: argparse.Namespace, report: dict[str, Any], points: Sequence[Point]) -> None:
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.csv:
        with open(args.csv, "w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=CSV_FIELDS)
            writer.writeheader()
            writer.writerows(csv_rows(points))
    if args.plot:
        from triton_ort.cli.perf_plot import svg_plot

        title = (
            f"{args.model}: latency against throughput (batch {report['batch']}, {args.protocol}, "
            f"{report['transport']})"
        )
        args.plot.write_text(svg_plot(points, title))


# --- the command ----------------------------------------------------------------------------------------


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see --help\n")


def positive(kind: type, what: str) -> Any:
    """An argparse type: a number of `kind` above 0, else an error that says `what` is expected."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number ({what})") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}")
        return value

    return parse


def request_rate_range(text: str) -> list[float]:
    """perf_analyzer's --request-rate-range START:END[:STEP] (END included)."""
    try:
        parts = [float(part) for part in text.split(":")]
    except ValueError:
        parts = []
    if (
        len(parts) not in (2, 3)
        or parts[0] <= 0
        or parts[1] < parts[0]
        or (len(parts) == 3 and parts[2] <= 0)
    ):
        raise argparse.ArgumentTypeError(f"{text!r}: expected START:END[:STEP] with 0 < START <= END")
    step = parts[2] if len(parts) == 3 else parts[1] - parts[0] or 1.0
    rates, rate = [], parts[0]
    while rate <= parts[1] + 1e-9:
        rates.append(round(rate, 9))
        rate += step
    return rates


def concurrency_range(text: str) -> list[int]:
    """perf_analyzer's --concurrency-range START:END[:STEP] (END included)."""
    try:
        parts = [int(part) for part in text.split(":")]
    except ValueError:
        parts = []
    if not 2 <= len(parts) <= 3 or parts[0] < 1 or parts[1] < parts[0] or (len(parts) == 3 and parts[2] < 1):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected START:END[:STEP] with 1 <= START <= END, e.g. 1:16:4"
        )
    step = parts[2] if len(parts) == 3 else 1
    return list(range(parts[0], parts[1] + 1, step))


def percentile(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 1 <= value <= 99:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a percentile from 1 to 99 (e.g. 95)")
    return value


def add_measurement_options(
    parser: argparse.ArgumentParser, measurement_interval_ms: float, max_windows: int
) -> None:
    """How a point is measured, the same in perf and tune: protocol, transport, client processes, the
    windows and the latency that judges them. `resolve_shared_memory` completes them after parsing."""
    parser.add_argument(
        "-i", "--protocol", choices=["http", "grpc"], default="http", type=str.lower, help="default http"
    )
    parser.add_argument(
        "--client-processes",
        type=positive(int, "1 or more"),
        default=1,
        metavar="N",
        help="send from N client processes, the concurrency split between them (default 1): one Python "
        "process tops out below a fast server",
    )
    parser.add_argument(
        "--shared-memory",
        choices=["none", "system", "cuda"],
        default="none",
        help="inputs and outputs in registered regions: system shared memory (a client on the server's host) "
        "or CUDA shared memory (GPU hosts); default none: in the request body",
    )
    parser.add_argument("--cuda-shm", action="store_true", help="short for --shared-memory cuda")
    parser.add_argument(
        "-p",
        "--measurement-interval",
        type=positive(float, "milliseconds above 0"),
        default=measurement_interval_ms,
        metavar="MS",
        help="length of a measurement window (default %(default)g ms)",
    )
    parser.add_argument(
        "-s",
        "--stability-percentage",
        type=positive(float, "a percentage above 0"),
        default=10.0,
        metavar="PCT",
        help=f"the last {STABLE_WINDOWS} windows must agree within it (default 10)",
    )
    parser.add_argument(
        "--max-windows",
        "--max-trials",
        type=positive(int, "1 or more"),
        default=max_windows,
        metavar="N",
        help="windows per point at most (default %(default)s)",
    )
    parser.add_argument(
        "--percentile",
        type=percentile,
        metavar="P",
        help="the latency percentile (1-99) that judges stability, the latency limit and the report "
        "(default: the mean, as perf_analyzer)",
    )


def resolve_shared_memory(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--cuda-shm is short for --shared-memory cuda; the two disagreeing is an error."""
    if args.cuda_shm and args.shared_memory not in ("none", "cuda"):
        parser.error(f"--cuda-shm and --shared-memory {args.shared_memory}: give one")
    args.shared_memory = "cuda" if args.cuda_shm else args.shared_memory


def build_parser(prog: str) -> argparse.ArgumentParser:
    from triton_ort.cli.infer import host_port

    parser = _Parser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", nargs="?", help="the model's name on the server (or -m)")
    parser.add_argument(
        "-m", dest="model_option", metavar="MODEL", help="the same, as perf_analyzer takes it"
    )
    parser.add_argument(
        "-u", "--url", type=host_port, help="host:port (default 127.0.0.1:8000 for http, :8001 for grpc)"
    )
    parser.add_argument(
        "-b",
        "--batch-size",
        type=positive(int, "1 or more"),
        metavar="N",
        help="rows per request (default 1)",
    )
    sweep = parser.add_mutually_exclusive_group()
    sweep.add_argument(
        "--concurrency",
        type=positive(int, "1 or more"),
        nargs="+",
        metavar="N",
        help="requests in flight, one point each (default 1)",
    )
    sweep.add_argument(
        "--concurrency-range", type=concurrency_range, metavar="START:END[:STEP]", help="as perf_analyzer's"
    )
    sweep.add_argument(
        "--request-rate",
        type=positive(float, "requests per second above 0"),
        nargs="+",
        metavar="R",
        help="instead: open-loop load at these rates (requests/s), one point each; at most "
        f"{MAX_IN_FLIGHT} in flight",
    )
    sweep.add_argument(
        "--request-rate-range",
        type=request_rate_range,
        metavar="START:END[:STEP]",
        help="the same, as perf_analyzer's (END included)",
    )
    parser.add_argument(
        "--distribution",
        choices=["constant", "poisson"],
        default="constant",
        help="--request-rate's arrivals: evenly spaced (default) or Poisson (exponential gaps, --seed)",
    )
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2,...",
        help="an input's dims without the batch axis, for its open axes (as perf_analyzer's --shape; "
        "NAME=... too, and the whole shape with the batch axis first sets -b)",
    )
    add_request_data_options(parser)
    parser.add_argument(
        "--inputs", type=Path, metavar="FILE.npz", help="real inputs by name, batch axis first"
    )
    parser.add_argument(
        "--string-data", metavar="TEXT", help="every string input element (default random words)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    add_measurement_options(parser, measurement_interval_ms=2000.0, max_windows=10)
    parser.add_argument(
        "--latency-threshold",
        type=positive(float, "milliseconds above 0"),
        metavar="MS",
        help="end the sweep after the first concurrency whose latency (the mean, or --percentile's) is "
        "above it",
    )
    parser.add_argument(
        "--metrics-url",
        type=host_port,
        metavar="HOST:PORT",
        help="Triton's metrics endpoint, for the server's GPU utilisation and memory per point "
        "(default: port 8002 of a server on ports 8000/8001)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every point as JSON")
    parser.add_argument("--csv", "-f", type=Path, metavar="FILE", help="write every point as CSV")
    parser.add_argument("--plot", type=Path, metavar="FILE.svg", help="latency against throughput (SVG)")
    parser.add_argument(
        "--compare-native",
        action="store_true",
        help=f"also measure MODEL{NATIVE_SUFFIX}: the same model.onnx served by Triton's onnxruntime backend",
    )
    parser.add_argument(
        "--native-model", metavar="NAME", help=f"the native model's name (default MODEL{NATIVE_SUFFIX})"
    )
    return parser


async def _measure(
    args: argparse.Namespace,
    targets: list[Target],
    slots: list[tuple[list[Any], list[Any]]],
    batch: int,
    requests: list[dict[str, NDArray[Any]]],
) -> list[Point]:
    points: list[Point] = []
    metrics_url = args.metrics_url or metrics_address(args.url)
    in_flight = MAX_IN_FLIGHT if args.request_rate else max(args.concurrency)
    shared = args.shared_memory != "none"
    async with Load(args.protocol, args.url, slots, in_flight, shared, metrics_url, requests) as load:
        for level in args.request_rate or args.concurrency:
            for target in targets:  # at each load one after the other: the same moment of the host
                if args.request_rate:
                    points.append(await load.point_at_rate(target, level, batch, args))
                else:
                    points.append(await load.point(target, level, batch, args))
            ours = next(p for p in points[-len(targets) :] if p.model == targets[0].name)
            if args.latency_threshold is not None and ours.latency_us > args.latency_threshold * 1e3:
                what = f"p{ours.percentile:g}" if ours.percentile else "mean latency"
                note(
                    f"{ours.model} {ours.load}: {what} {ours.latency_us / 1e3:.3f} ms is above "
                    f"--latency-threshold {args.latency_threshold:g} ms; the sweep ends here"
                )
                break
    return points


def metrics_address(url: str) -> str | None:
    """Triton's metrics endpoint beside a server on Triton's default ports (8000, 8001): the same host, port
    8002. A server on other ports has its metrics elsewhere too: --metrics-url names it."""
    host, _, port = url.rpartition(":")
    return f"{host}:8002" if port in ("8000", "8001") else None


def run(args: argparse.Namespace) -> int:
    client = make_client(args.protocol, args.url)
    metadata = model_metadata(client, args.model)
    config = model_config(client, args.model)
    signature = ModelSignature.from_config(config)
    datatypes = {meta.name: meta.datatype for meta in tensor_metas(metadata, "inputs")}
    overrides = parse_ranges_option(args.range)
    check_range_names(overrides, list(datatypes))
    ranges = value_ranges(datatypes.items(), config, overrides)
    if args.verbose:
        for line in describe(ranges):
            note(line)
    requests, batch = build_requests(
        signature,
        metadata,
        args.batch_size,
        args.shape,
        args.inputs,
        args.string_data,
        args.seed,
        input_data=args.input_data,
        ranges=ranges,
    )
    batched = signature.max_batch_size > 0
    targets = [Target(args.model, expected_outputs(metadata, batch, batched))]
    native = args.native_model or f"{args.model}{NATIVE_SUFFIX}"
    loaded = False
    if args.compare_native:
        ready, loaded, why = native_twin(client, native)
        if ready:
            targets.append(Target(native, expected_outputs(model_metadata(client, native), batch, batched)))
        else:
            note(why)
    try:
        slot_count = MAX_IN_FLIGHT if args.request_rate else max(args.concurrency)
        with request_slots(args, requests, targets[0].expected, slot_count) as slots:
            points = asyncio.run(_measure(args, targets, slots, batch, requests))
    finally:
        if loaded:
            with contextlib.suppress(InferenceServerException):
                client.unload_model(native)
    print(table(points))
    compared = ratios(points, args.model, native) if len(targets) > 1 else []
    for line in compared:
        print(line)
    report = {
        "model": args.model,
        "protocol": args.protocol,
        "url": args.url,
        "transport": {"none": "numpy", "cuda": "cuda-shm", "system": "system-shm"}[args.shared_memory],
        "batch": batch,
        "inputs": {name: f"{array.dtype}{list(array.shape)}" for name, array in requests[0].items()},
        "requests_in_data": len(requests),
        "measurement_interval_ms": args.measurement_interval,
        "stability_percentage": args.stability_percentage,
        "max_windows": args.max_windows,
        "native": native if len(targets) > 1 else None,
        "points": [asdict(point) for point in points],
        "ratios": compared,
    }
    write_reports(args, report, points)
    return 0


def main(argv: list[str] | None = None, prog: str = "triton-ort perf") -> None:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.model and args.model_option and args.model != args.model_option:
        parser.error(f"two models: {args.model!r} and -m {args.model_option!r}; give one")
    args.model = args.model or args.model_option
    if not args.model:
        parser.error("no model: give its name (triton-ort perf MODEL, or -m MODEL)")
    resolve_shared_memory(parser, args)
    args.request_rate = args.request_rate or args.request_rate_range
    args.concurrency = args.concurrency or args.concurrency_range or [1]
    args.url = args.url or DEFAULT_URLS[args.protocol]
    from triton_ort.harness.server import exit_on_termination

    exit_on_termination()  # SIGTERM and SIGHUP unwind: --client-processes' processes are stopped on the way
    if args.plot and args.plot.suffix.lower() != ".svg":
        parser.error(f"--plot {args.plot}: the plot is an SVG file; name it with .svg")
    try:
        sys.exit(run(args))
    except RequestError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    except PerfError as error:
        parser.exit(1, f"{parser.prog}: error: {error}\n")
    except (InferenceServerException, OSError) as error:
        parser.exit(1, f"{parser.prog}: error: {args.protocol} {args.url}: {_one_line(error)}\n")


if __name__ == "__main__":
    main()
