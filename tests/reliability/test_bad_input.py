"""Malformed requests against the real tritonserver, through tritonclient (HTTP and gRPC), hand-written
KServe v2 JSON and binary bodies, and hand-built gRPC protobufs.

Most are refused by Triton core before model.py, against config.pbtxt; the tests pin the status and that the
message names the input, what was expected and what came. Those that reach model.py (value-dependent ORT
failures, allocations no machine can make, shapes that cannot be gathered, NaN/Inf) are sent together with
good requests into one execute() (long queue delays; Triton's statistics show the batching), and the good
ones must get their correct answers. After every case the server must still be ready.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.reliability.support import DEMO_INPUT, DEMO_OUTPUT, assert_demo_answer, measured
from tests.support.paths import DEMO_MAX_BATCH, SERVER_TOLERANCE, demo_onnx
from tests.support.repository import MULTI_IO
from triton_ort.harness.malformed import malformed_requests
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.releases import ErrorCode, Release
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import (
    Answer,
    GivenTensors,
    RawTensor,
    TensorMeta,
    binary_body,
    grpc_raw,
    http_raw,
    statistics,
    tritonclient_infer,
)

pytestmark = pytest.mark.integration

RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 2010)).astype(np.float32)
PROTOCOLS = ("http", "grpc")


@dataclass(frozen=True)
class BadCase:
    """A malformed request, the Triton error code it must get (None: answered), and what the message says.

    `per_release` replaces code and message where a release answers its own way (releases.py)."""

    id: str
    protocol: str
    send: Callable[[LocalTritonServer], Answer]
    code: ErrorCode | None
    says: tuple[str, ...]
    pattern: re.Pattern[str] | None = None
    per_release: Callable[[Release], tuple[frozenset[str], tuple[str, ...]]] | None = None

    def expected(self, release: Release) -> tuple[frozenset[str], tuple[str, ...]]:
        if self.per_release is not None:
            return self.per_release(release)
        status = "OK" if self.code is None else release.status(self.protocol, self.code)
        return frozenset({status}), self.says


Send = Callable[[LocalTritonServer], Answer]


def _tc(protocol: str, model: str, inputs: GivenTensors, outputs: list[str] | None = None) -> Send:
    def send(server: LocalTritonServer) -> Answer:
        url = server.http_url if protocol == "http" else server.grpc_url
        return tritonclient_infer(protocol, url, model, inputs, outputs)

    return send


def _json(model: str, body: bytes | dict[str, Any], headers: dict[str, str] | None = None) -> Send:
    return lambda server: http_raw(server.http_url, model, body, headers)


def _grpc(model: str, tensors: list[RawTensor]) -> Send:
    return lambda server: grpc_raw(server.grpc_url, model, tensors)


def _json_demo(shape: list[int], data: list[Any], datatype: str = "FP32", copies: int = 1) -> dict[str, Any]:
    return {"inputs": [{"name": DEMO_INPUT, "shape": shape, "datatype": datatype, "data": data}] * copies}


def _tritonclient_cases() -> list[BadCase]:
    """The shared catalogue (triton_ort.harness.malformed) for the demo and multi_io, over both protocols,
    and what only a name can get wrong: an unknown output, an unknown model."""
    models = {
        "demo": ([TensorMeta(DEMO_INPUT, "FP32", (-1, 2010))], DEMO_MAX_BATCH),
        "multi_io": (
            [TensorMeta(t.name, t.data_type, (-1, *t.dims)) for t in MULTI_IO.inputs],
            MULTI_IO.max_batch_size,
        ),
    }
    cases = []
    for protocol in PROTOCOLS:
        for model, (metas, max_batch_size) in models.items():
            for bad in malformed_requests(model, metas, max_batch_size, seed=7):
                send = _tc(protocol, model, bad.inputs)
                cases.append(
                    BadCase(f"{protocol}-{model}-{bad.kind}", protocol, send, bad.code, (), bad.says)
                )
        unknown_output = _tc(protocol, "demo", [(DEMO_INPUT, X)], ["nope"])
        says_output = ("unexpected inference output 'nope' for model 'demo'",)
        cases.append(
            BadCase(f"{protocol}-unknown_output", protocol, unknown_output, "INVALID_ARG", says_output)
        )
        unknown_model = _tc(protocol, "no_such_model", [(DEMO_INPUT, X)])
        says_model = ("Request for unknown model: 'no_such_model' is not found",)
        cases.append(BadCase(f"{protocol}-unknown_model", protocol, unknown_model, "NOT_FOUND", says_model))
    return cases


def _raw_cases() -> list[BadCase]:
    expected_shape = f"unexpected shape for input '{DEMO_INPUT}' for model 'demo'. Expected [-1,2010]"
    one_row = X[:1].tobytes()
    short_body, short_headers = binary_body([(DEMO_INPUT, [1, 2010], "FP32", one_row)], [DEMO_OUTPUT])
    # The header promises 8040 bytes, the body ends 4 bytes early.
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": DEMO_INPUT,
                    "shape": [1, 2010],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 8040},
                }
            ]
        }
    ).encode()
    truncated = header + one_row[:-4]
    # What Triton's own JSON reader refuses is INTERNAL (server src/http_server.cc: TRITONJSON_STATUSRETURN,
    # and "Shape does not match true shape of 'data'"): HTTP 500 from 2.42 on, 400 before (releases.py).
    return [
        BadCase(
            "json-rank_without_batch_axis",
            "http",
            _json("demo", _json_demo([4], [0.0] * 4)),
            "INVALID_ARG",
            (expected_shape, "got [4]"),
        ),
        # With max_batch_size > 0 Triton reads the first axis as the batch: [2010] is a batch of 2010 rows.
        BadCase(
            "json-rank_1_read_as_batch",
            "http",
            _json("demo", _json_demo([2010], [0.0] * 2010)),
            "INVALID_ARG",
            (f"inference request batch-size must be <= {DEMO_MAX_BATCH} for 'demo'",),
        ),
        BadCase(
            "json-duplicate_input",
            "http",
            _json("demo", _json_demo([1, 2010], [0.0] * 2010, copies=2)),
            "INVALID_ARG",
            (f"input '{DEMO_INPUT}' already exists in request",),
        ),
        BadCase(
            "json-bytes_datatype_for_numeric_input",
            "http",
            _json("demo", _json_demo([1, 2010], ["0.5"] * 2010, datatype="BYTES")),
            "INVALID_ARG",
            (f"inference input '{DEMO_INPUT}' data-type is 'BYTES', but model 'demo' expects 'FP32'",),
        ),
        BadCase(
            "json-strings_in_numeric_data",
            "http",
            _json("demo", _json_demo([1, 2010], ["a"] * 2010)),
            "INTERNAL",
            ("Unable to parse 'data': attempt to access JSON non-number as double",),
        ),
        BadCase(
            "json-data_shorter_than_shape",
            "http",
            _json("demo", _json_demo([1, 2010], [0.0] * 2000)),
            "INTERNAL",
            ("Unable to parse 'data': Shape does not match true shape of 'data' field",),
        ),
        BadCase(
            "json-negative_dimension",
            "http",
            _json("demo", _json_demo([-1, 2010], [0.0] * 2010)),
            "INTERNAL",
            ("Unable to parse 'shape'",),
        ),
        BadCase(
            "json-not_json",
            "http",
            _json("demo", b'{"inputs": [ {"name": '),
            "INTERNAL",
            ("failed to parse the request JSON buffer",),
        ),
        BadCase(
            "binary-body_shorter_than_its_header_says",
            "http",
            _json(
                "demo",
                truncated,
                {
                    "Inference-Header-Content-Length": str(len(header)),
                    "Content-Type": "application/octet-stream",
                },
            ),
            "INVALID_ARG",
            (f"unexpected size for input '{DEMO_INPUT}', expecting 4 additional bytes for model 'demo'",),
        ),
        BadCase(
            "binary-well_formed_control",  # the same body, complete: must be answered (guards the case above)
            "http",
            _json("demo", short_body, short_headers),
            None,
            (),
        ),
        BadCase(
            "grpc_raw-duplicate_input",
            "grpc",
            _grpc("demo", [(DEMO_INPUT, [1, 2010], "FP32", one_row)] * 2),
            "INVALID_ARG",
            (f"input '{DEMO_INPUT}' already exists in request",),
        ),
        # A tensor larger than any device: 4 TiB claimed. Refused on its shape before anything is allocated.
        BadCase(
            "grpc_raw-tensor_larger_than_any_device",
            "grpc",
            _grpc("demo", [(DEMO_INPUT, [1, 2**40], "FP32", one_row)]),
            "INVALID_ARG",
            (expected_shape, "got [1,1099511627776]"),
        ),
        # Worded per release: Release.negative_dimension_grpc.
        BadCase(
            "grpc_raw-negative_dimension",
            "grpc",
            _grpc("demo", [(DEMO_INPUT, [-1, 2010], "FP32", one_row)]),
            None,
            (),
            per_release=lambda release: (
                release.negative_dimension_grpc[0],
                (release.negative_dimension_grpc[1],),
            ),
        ),
    ]


CASES = _tritonclient_cases() + _raw_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_request_gets_a_clear_error_and_its_neighbours_their_answers(
    server: LocalTritonServer, release: Release, case: BadCase
) -> None:
    neighbours = [RNG.standard_normal((3, 2010)).astype(np.float32) for _ in range(3)]
    with ThreadPoolExecutor(4) as pool:
        good = [
            pool.submit(tritonclient_infer, p, url, "demo", [(DEMO_INPUT, x)], [DEMO_OUTPUT])
            for x, (p, url) in zip(
                neighbours,
                [("http", server.http_url), ("grpc", server.grpc_url), ("http", server.http_url)],
                strict=True,
            )
        ]
        bad = pool.submit(case.send, server)
    answer = bad.result()
    statuses, says = case.expected(release)
    assert answer.status in statuses, f"{case.id}: {answer.status} {answer.message}"
    for fragment in says:
        assert fragment in answer.message, f"{case.id}: {fragment!r} not in {answer.message!r}"
    if case.pattern is not None:
        assert case.pattern.search(answer.message), (
            f"{case.id}: {case.pattern.pattern!r} not in {answer.message!r}"
        )
    for future, x in zip(good, neighbours, strict=True):
        assert_demo_answer(future.result(), x)
    assert httpclient.InferenceServerClient(server.http_url).is_server_ready()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_zero_row_batch_gets_an_answer_or_an_error_and_nothing_breaks(
    server: LocalTritonServer, protocol: str
) -> None:
    """A [0, 2010] request. The library answers it with a [0, 2] output (tests/unit), but Triton 23.12's
    python backend never hands it over: it reads the inner axis as the batch size and refuses it with
    "batch size 2010 ... max allowed is <max_batch_size>" (gRPC INTERNAL). Either keeps the server up."""
    url = server.http_url if protocol == "http" else server.grpc_url
    answer = tritonclient_infer(protocol, url, "demo", [(DEMO_INPUT, np.zeros((0, 2010), np.float32))])
    if answer.ok:
        assert answer.outputs is not None and answer.outputs[DEMO_OUTPUT].shape == (0, 2)
    else:
        assert answer.status != "NO_ANSWER", answer
        measured(f"zero-row request over {protocol}: {answer.status} {answer.message!r}")
    assert_demo_answer(tritonclient_infer(protocol, url, "demo", [(DEMO_INPUT, X)], [DEMO_OUTPUT]), X)


@pytest.mark.parametrize("transport", ["http_binary", "grpc_raw"])
@pytest.mark.parametrize("payload", ["4_bytes_short", "4_bytes_long"])
def test_payload_of_the_wrong_length_is_refused(
    server: LocalTritonServer, release: Release, request: pytest.FixtureRequest, transport: str, payload: str
) -> None:
    """A [1, 2010] FP32 tensor is 8040 bytes; a payload that says (consistently) it has 8036 or 8044 must
    be refused. Triton before 2.47 (24.06, triton-inference-server/core#350) does not check: it answers,
    and for a short payload the model reads bytes past the payload, from Triton's shared memory, where an
    earlier request's data may still lie (docs/reliability.md shows one leaking into an answer)."""
    if not release.checks_input_byte_size:
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="Triton < 2.47 accepts a payload whose length does not match its shape "
                "(fixed in 24.06); no python-backend API lets model.py see it",
            )
        )
    one_row = X[:1].tobytes()
    raw = one_row[:-4] if payload == "4_bytes_short" else one_row + b"\0\0\0\0"
    if transport == "http_binary":
        body, headers = binary_body([(DEMO_INPUT, [1, 2010], "FP32", raw)], [DEMO_OUTPUT])
        answer = http_raw(server.http_url, "demo", body, headers)
    else:
        answer = grpc_raw(server.grpc_url, "demo", [(DEMO_INPUT, [1, 2010], "FP32", raw)])
    assert httpclient.InferenceServerClient(server.http_url).is_server_ready()
    assert not answer.ok, f"a {len(raw)}-byte payload for an 8040-byte tensor was answered: {answer.outputs}"
    assert answer.status in release.statuses("INVALID_ARG")
    assert DEMO_INPUT in answer.message and "8040" in answer.message


# --- requests that reach model.py, in one execute() with good neighbours ------------------------------


def _send_together(
    server: LocalTritonServer, model: str, requests: Sequence[GivenTensors], outputs: list[str]
) -> list[Answer]:
    """Concurrent requests (alternating HTTP and gRPC); returns the answers and the new batches."""
    before = statistics(server.http_url, model)
    with ThreadPoolExecutor(len(requests)) as pool:
        futures = [
            pool.submit(
                tritonclient_infer,
                PROTOCOLS[i % 2],
                server.http_url if i % 2 == 0 else server.grpc_url,
                model,
                inputs,
                outputs,
            )
            for i, inputs in enumerate(requests)
        ]
        answers = [f.result() for f in futures]
    after = statistics(server.http_url, model)
    executions = after.executions - before.executions
    batches = after.new_batches(before)
    measured(f"{model}: {len(requests)} concurrent requests ran in {executions} execute() call(s): {batches}")
    assert executions < len(requests), f"nothing was batched: {executions} executions, {batches}"
    assert httpclient.InferenceServerClient(server.http_url).is_server_ready()
    return answers


def test_value_dependent_ort_failure_fails_alone_in_its_batch(
    server: LocalTritonServer, release: Release
) -> None:
    xs = [RNG.standard_normal((1, 4)).astype(np.float32) for _ in range(8)]
    idxs = [np.array([[i % 4]], dtype=np.int64) for i in range(8)]
    idxs[3] = np.array([[9]], dtype=np.int64)  # out of range: ORT fails for this request's values only
    answers = _send_together(
        server, "gather", [[("x", x), ("idx", i)] for x, i in zip(xs, idxs, strict=True)], ["out"]
    )
    for i, answer in enumerate(answers):
        if i == 3:
            assert answer.status in release.statuses("INVALID_ARG"), answer
            assert "could not compute this request" in answer.message and "GatherElements" in answer.message
            assert "Out of range value in index tensor" in answer.message
        else:
            assert answer.ok, answer
            np.testing.assert_array_equal(answer.outputs["out"], xs[i][:, idxs[i][0, 0]].reshape(1, 1))


def test_allocation_larger_than_the_device_fails_alone_in_its_batch(
    server: LocalTritonServer, release: Release
) -> None:
    """`blowup` needs rows * max(size) floats of ORT memory. size 2**48 asks for 1 PiB per row: the
    allocation is refused at once (beyond RAM and the address space), nothing is touched."""
    xs = [RNG.standard_normal((2, 1)).astype(np.float32) for _ in range(6)]
    sizes = [np.full((2, 1), 16 + i, dtype=np.int64) for i in range(6)]
    sizes[2] = np.full((2, 1), 2**48, dtype=np.int64)
    answers = _send_together(
        server, "blowup", [[("x", x), ("size", s)] for x, s in zip(xs, sizes, strict=True)], ["out"]
    )
    for i, answer in enumerate(answers):
        if i == 2:
            assert not answer.ok and answer.status != "NO_ANSWER", answer
            assert answer.status in release.statuses("INVALID_ARG"), answer  # its own size cannot fit
            assert "this request needs a buffer of" in answer.message, answer
        else:
            assert answer.ok, answer
            np.testing.assert_array_equal(answer.outputs["out"], xs[i])


def test_requests_that_cannot_be_gathered_run_apart_in_one_execute(server: LocalTritonServer) -> None:
    """Ragged batching lets requests of different inner shapes into one execute(); model.py groups them by
    shape, and the one whose two inputs disagree (3 vs 5) fails alone, inside ORT."""
    shapes = [(1, 3, 3), (2, 3, 3), (1, 5, 5), (1, 3, 5), (3, 5, 5), (2, 7, 7)]
    pairs = [
        (RNG.standard_normal((b, n)).astype(np.float32), RNG.standard_normal((b, m)).astype(np.float32))
        for b, n, m in shapes
    ]
    answers = _send_together(server, "ragged_add", [[("x", x), ("y", y)] for x, y in pairs], ["z"])
    for (_, n, m), (x, y), answer in zip(shapes, pairs, answers, strict=True):
        if n != m:
            assert not answer.ok and answer.status != "NO_ANSWER", answer
            assert "could not compute this request" in answer.message and "3 by 5" in answer.message, answer
        else:
            assert answer.ok, answer
            np.testing.assert_array_equal(answer.outputs["z"], x + y)


def test_nan_and_inf_pass_through_and_touch_no_other_row(server: LocalTritonServer) -> None:
    xs = [RNG.standard_normal((2, 2010)).astype(np.float32) for _ in range(6)]
    xs[1][0, 5] = np.nan
    xs[3][1, :] = np.inf
    xs[4][0, 0] = -np.inf
    answers = _send_together(server, "demo_batched", [[(DEMO_INPUT, x)] for x in xs], [DEMO_OUTPUT])
    for x, answer in zip(xs, answers, strict=True):
        assert answer.ok, answer
        want = reference_outputs(demo_onnx(), {DEMO_INPUT: x})[DEMO_OUTPUT]
        np.testing.assert_allclose(answer.outputs[DEMO_OUTPUT], want, equal_nan=True, **SERVER_TOLERANCE)
    assert np.isnan(answers[1].outputs[DEMO_OUTPUT][0]).all()
    assert np.isfinite(answers[1].outputs[DEMO_OUTPUT][1]).all()  # the row beside it is untouched


def test_malformed_requests_do_not_disturb_the_batch_they_arrive_with(
    server: LocalTritonServer, release: Release
) -> None:
    xs = [RNG.standard_normal((2, 2010)).astype(np.float32) for _ in range(6)]
    bad: list[GivenTensors] = [
        [(DEMO_INPUT, xs[0].astype(np.float64))],
        [(DEMO_INPUT, np.zeros((2, 2011), np.float32))],
        [(DEMO_INPUT, np.zeros((DEMO_MAX_BATCH + 1, 2010), np.float32))],
        [(DEMO_INPUT, np.full((1, 2010), b"1", dtype=np.object_), "BYTES")],
    ]
    requests: list[GivenTensors] = [
        *([(DEMO_INPUT, x)] for x in xs[:3]),
        *bad,
        *([(DEMO_INPUT, x)] for x in xs[3:]),
    ]
    answers = _send_together(server, "demo_batched", requests, [DEMO_OUTPUT])
    good = answers[:3] + answers[3 + len(bad) :]
    for x, answer in zip(xs, good, strict=True):
        assert_demo_answer(answer, x)
    for answer in answers[3 : 3 + len(bad)]:
        assert answer.status in release.statuses("INVALID_ARG"), answer
        assert DEMO_INPUT in answer.message or f"batch-size must be <= {DEMO_MAX_BATCH}" in answer.message, (
            answer
        )


@pytest.mark.parametrize(
    ("mode", "layout"),
    [(0, "contiguous"), (1, "transposed"), (2, "row_offset"), (3, "column_stride"), (4, "numpy_transposed")],
)
def test_strided_tensor_from_an_upstream_model(server: LocalTritonServer, mode: int, layout: str) -> None:
    """An upstream python model hands `demo` a torch tensor through DLPack. Triton 23.12 refuses a
    non-contiguous DLPack tensor at the upstream model (pb_utils.Tensor.from_dlpack) with a clear error,
    so none reaches model.py this way (the library binds one correctly: tests/unit/test_runner.py); a view
    with a storage offset, and a strided numpy array (copied by pb_utils.Tensor), arrive and are right."""
    x = RNG.standard_normal((3, 2010)).astype(np.float32)
    answer = tritonclient_infer(
        "grpc",
        server.grpc_url,
        "strided_upstream",
        [("x", x), ("mode", np.array([mode], dtype=np.int32))],
        [DEMO_OUTPUT],
    )
    if layout in ("transposed", "column_stride"):
        assert not answer.ok and answer.status != "NO_ANSWER", answer
        assert "DLPack tensor is not contiguous" in answer.message, answer
    else:
        assert_demo_answer(answer, x)
    assert httpclient.InferenceServerClient(server.http_url).is_server_ready()


def test_errors_found_by_the_model_are_client_errors_over_grpc(server: LocalTritonServer) -> None:
    """A request that fails on its own values (an index out of range, inputs that disagree) is the
    client's fault: gRPC INVALID_ARGUMENT, as for every error Triton core finds, not INTERNAL (a server
    fault, which clients retry). model.py gives InputErrors the TritonError.INVALID_ARG code."""
    gather = tritonclient_infer(
        "grpc",
        server.grpc_url,
        "gather",
        [("x", np.ones((1, 4), np.float32)), ("idx", np.array([[9]], dtype=np.int64))],
    )
    ragged = tritonclient_infer(
        "grpc",
        server.grpc_url,
        "ragged_add",
        [("x", np.ones((1, 3), np.float32)), ("y", np.ones((1, 5), np.float32))],
    )
    for answer in (gather, ragged):
        assert answer.message.startswith("the model could not compute"), answer
        assert answer.status == "StatusCode.INVALID_ARGUMENT", f"{answer.status}: {answer.message[:120]}"
