"""Models exported the usual way, served with the two-line config (plus the sequence batcher's control
inputs where a model has them), every answer compared with in-process ONNX Runtime over HTTP and gRPC with
concurrent requests: a scikit-learn classifier (its [N] label: dims [1] with an empty reshape, as the native
backend serves it), a BERT-style encoder, a NonZero detector that finds nothing, a LabelEncoder with
strings in and out beside numbers, and an accumulator under the sequence batcher with several interleaved
sequences. The models are built here (tests/exported.py)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from numpy.typing import NDArray

from tests import exported, graphs
from tests.paths import SERVER_TOLERANCE
from triton_ort.autocomplete import DEFAULT_MAX_BATCH_SIZE
from triton_ort.testing.reference import reference_outputs
from triton_ort.testing.server import LocalTritonServer
from triton_ort.testing.transport import PROTOCOLS, infer, infer_inputs, make_client, model_config

pytestmark = pytest.mark.integration

TWO_LINES = 'backend: "onnxruntime_zerocopy"\nmax_batch_size: 8\n'
CONCURRENCY = 8


NOT_EXPORTED: dict[str, str] = {}
"""Why an exported model is missing from the served repository, by name."""


def _add(repository: Path, name: str, build: Callable[[Path], Path], config: str) -> Path:
    onnx_path = build(repository.parent / "onnx" / f"{name}.onnx")
    version = repository / name / "1"
    version.mkdir(parents=True)
    shutil.copy(onnx_path, version / "model.onnx")
    (repository / name / "config.pbtxt").write_text(config)
    return onnx_path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalTritonServer, dict[str, Path]]]:
    repository = tmp_path_factory.mktemp("exported") / "repository"
    repository.mkdir()
    # The exporters are dev requirements; a host without them (the GPU test host has no index), or with
    # one that cannot import its model (that host's transformers cannot import BertModel), serves the
    # other models, and the tests of these skip, saying why.
    files: dict[str, Path] = {}
    for name, exporter, build in (
        ("sk_pipe", "skl2onnx", exported.sklearn_classifier),
        ("bert", "transformers", exported.bert_encoder),
    ):
        if importlib.util.find_spec(exporter) is None:
            NOT_EXPORTED[name] = f"{exporter} is not installed here (requirements-dev.txt)"
            continue
        try:
            files[name] = _add(repository, name, build, TWO_LINES)
        except ImportError as error:
            NOT_EXPORTED[name] = f"{exporter} is installed but could not export: {str(error).splitlines()[0]}"
    files |= {
        "detector": _add(repository, "detector", graphs.nonzero, 'backend: "onnxruntime_zerocopy"\n'),
        # max_batch_size 0 written out: read as unset, filled with the default, and said so in the log.
        "explicit_zero": _add(
            repository,
            "explicit_zero",
            graphs.multi_io,
            'backend: "onnxruntime_zerocopy"\nmax_batch_size: 0\n',
        ),
        "accumulator": _add(
            repository, "accumulator", exported.accumulator, TWO_LINES + exported.SEQUENCE_CONFIG
        ),
        "labels": _add(repository, "labels", graphs.label_encoder, TWO_LINES),
    }
    with LocalTritonServer(repository) as server:
        yield server, files


def _exported(served: Any, model: str) -> tuple[LocalTritonServer, Path]:
    server, files = served
    if model not in files:
        pytest.skip(f"{model}: {NOT_EXPORTED.get(model, 'not built')}")
    return server, files[model]


def _concurrently(calls: list[Callable[[], None]]) -> None:
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        for future in [pool.submit(call) for call in calls]:
            future.result()


def _check_answers(
    server: LocalTritonServer,
    model: str,
    onnx_path: Path,
    requests: list[dict[str, NDArray[Any]]],
    compare: Callable[[str, NDArray[Any], NDArray[Any]], None],
) -> None:
    """Every request over both protocols at once, each answer against in-process ORT."""
    names = [
        str(entry["name"]) for entry in model_config(make_client("http", server.http_url), model)["output"]
    ]

    def one(protocol: str, inputs: dict[str, NDArray[Any]]) -> None:
        url = server.http_url if protocol == "http" else server.grpc_url
        got, _ = infer(make_client(protocol, url), model, inputs, names)
        want = reference_outputs(onnx_path, inputs)
        for name in names:
            compare(name, got[name], want[name])

    _concurrently([partial(one, p, r) for p in PROTOCOLS for r in requests])


def _close(name: str, got: NDArray[Any], want: NDArray[Any]) -> None:
    assert got.dtype == want.dtype, name
    np.testing.assert_allclose(got, want, err_msg=name, **SERVER_TOLERANCE)


def test_a_sklearn_classifier_loads_with_two_lines_and_answers_like_onnx_runtime(served: Any) -> None:
    server, onnx_path = _exported(served, "sk_pipe")
    config = model_config(make_client("http", server.http_url), "sk_pipe")
    label = next(entry for entry in config["output"] if entry["name"] == "label")
    assert [int(d) for d in label["dims"]] == [1] and label["reshape"] == {"shape": []}  # the native form
    rng = np.random.default_rng(1)
    requests = [
        {"X": rng.standard_normal((rows, exported.FEATURES)).astype(np.float32)} for rows in (1, 3, 8)
    ]

    def compare(name: str, got: NDArray[Any], want: NDArray[Any]) -> None:
        if name == "label":  # Triton answers [batch, 1] for the model's [batch] (the reshape's dims)
            assert got.shape == (*want.shape, 1)
            want = want.reshape(got.shape)
        _close(name, got, want)

    _check_answers(server, "sk_pipe", onnx_path, requests * 4, compare)


def test_infer_expect_compares_onnx_runtimes_label_in_the_served_shape(served: Any, tmp_path: Path) -> None:
    """`triton-ort infer --expect` with ONNX Runtime's own outputs of the classifier: its label [N] is
    answered [N, 1] (the config's reshape) and matches; a shape the config does not map still fails."""
    server, onnx_path = _exported(served, "sk_pipe")
    x = np.random.default_rng(5).standard_normal((5, exported.FEATURES)).astype(np.float32)
    want = reference_outputs(onnx_path, {"X": x})
    assert want["label"].shape == (5,)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "expected.npz", **want)
    np.savez(tmp_path / "flat.npz", **{**want, "probabilities": want["probabilities"].reshape(-1)})
    command = [str(Path(sys.executable).parent / "triton-ort"), "infer", "sk_pipe", "--url", server.http_url]
    command += ["--input", f"X={tmp_path / 'x.npy'}", *(f"--{k}={v}" for k, v in SERVER_TOLERANCE.items())]

    def expect(archive: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, "--expect", str(tmp_path / archive)], capture_output=True, text=True, timeout=120
        )

    matched = expect("expected.npz")
    assert matched.returncode == 0 and "OK: outputs match" in matched.stdout, matched.stdout + matched.stderr
    assert "label int64[5, 1]" in matched.stdout  # the client still sees the served shape
    flat = expect("flat.npz")
    assert flat.returncode == 1, flat.stdout + flat.stderr
    assert "output 'probabilities': got float32[5, 3], expected float32[15]" in flat.stdout, flat.stdout
    assert "'label'" not in flat.stdout  # the label still matches


def test_a_bert_encoder_answers_like_onnx_runtime_at_several_batches_and_lengths(served: Any) -> None:
    server, onnx_path = _exported(served, "bert")
    rng = np.random.default_rng(2)
    requests = []
    for rows, length in ((1, 5), (2, 7), (4, 12), (3, 5)):
        mask = np.ones((rows, length), np.int64)
        mask[:, length - 2 :] = 0  # padding at the end, as a tokenizer pads
        requests.append(
            {"input_ids": rng.integers(0, exported.VOCAB, (rows, length)), "attention_mask": mask}
        )
    _check_answers(server, "bert", onnx_path, requests * 3, _close)


def test_a_detector_that_finds_nothing_answers_an_empty_tensor(served: Any) -> None:
    server, files = served
    config = model_config(make_client("http", server.http_url), "detector")
    assert int(config["max_batch_size"]) == 0  # NonZero's [2, ?] has no batch axis
    requests = [
        {"x": np.zeros((3, 4), np.float32)},  # nothing found: indices [2, 0]
        {"x": -np.ones((1, 4), np.float32)},
        {"x": np.array([[0, 1, 0, 0]], np.float32)},
    ]

    def compare(name: str, got: NDArray[Any], want: NDArray[Any]) -> None:
        assert got.shape == want.shape, (got.shape, want.shape)
        np.testing.assert_array_equal(got, want)

    _check_answers(server, "detector", files["detector"], requests * 4, compare)


def test_strings_in_and_out_beside_numbers_answer_like_onnx_runtime(served: Any) -> None:
    """BYTES in (a LabelEncoder), BYTES and numbers out, numbers beside them; strings of different
    lengths (an empty one, one not in the labels, UTF-8) in requests of several sizes, some gathered into
    one execute by the dynamic batcher."""
    server, files = served
    config = model_config(make_client("http", server.http_url), "labels")
    types = {entry["name"]: entry["data_type"] for entry in (*config["input"], *config["output"])}
    assert types == {
        "s": "TYPE_STRING",
        "x": "TYPE_FP32",
        "id": "TYPE_INT64",
        "t": "TYPE_STRING",
        "y": "TYPE_FP32",
    }
    words = [*graphs.LABELS, "", "a much longer string than the labels", "çà et là"]
    rng = np.random.default_rng(4)
    requests = []
    for rows in (1, 2, 5, 8):
        chosen = [words[i] for i in rng.integers(0, len(words), rows)]
        requests.append(
            {
                "s": np.array([[w.encode()] for w in chosen], dtype=object),
                "x": rng.standard_normal((rows, 2)).astype(np.float32),
            }
        )
    session = ort.InferenceSession(str(files["labels"]), providers=["CPUExecutionProvider"])
    names = ["id", "t", "y"]

    def one(protocol: str, inputs: dict[str, NDArray[Any]]) -> None:
        url = server.http_url if protocol == "http" else server.grpc_url
        got, _ = infer(make_client(protocol, url), "labels", inputs, names)
        text = np.vectorize(bytes.decode, otypes=[object])(inputs["s"])  # ORT takes str, not bytes
        want = dict(zip(names, session.run(names, {"s": text, "x": inputs["x"]}), strict=True))
        np.testing.assert_array_equal(got["id"], want["id"])
        np.testing.assert_array_equal(got["y"], want["y"])
        assert [[b.decode() for b in row] for row in got["t"]] == want["t"].tolist()

    _concurrently([partial(one, p, r) for p in PROTOCOLS for r in requests * 3])


def test_an_explicit_max_batch_size_zero_is_filled_in_with_the_native_backends_warning(served: Any) -> None:
    server, _ = served
    config = model_config(make_client("http", server.http_url), "explicit_zero")
    assert int(config["max_batch_size"]) == DEFAULT_MAX_BATCH_SIZE
    assert (
        f"autofilled max_batch_size to {DEFAULT_MAX_BATCH_SIZE} for model 'explicit_zero' since batching is "
        "supported" in server.log()
    )


def test_interleaved_sequences_under_the_sequence_batcher_get_their_own_running_sums(served: Any) -> None:
    """Sequences of different lengths, sent step by step from threads over both protocols at once; each
    step sends the previous total back as the state, and every answer is compared with ORT on the inputs
    that step saw (START and END as the sequence batcher sets them, CORRID the sequence's id)."""
    server, files = served
    steps = {1000 + s: np.random.default_rng(s).standard_normal(3 + s).astype(np.float32) for s in range(6)}

    def sequence(protocol: str, sequence_id: int) -> None:
        module = PROTOCOLS[protocol]
        url = server.http_url if protocol == "http" else server.grpc_url
        client = make_client(protocol, url)
        values = steps[sequence_id] + (0.5 if protocol == "grpc" else 0.0)
        wire_id = sequence_id + (100 if protocol == "grpc" else 0)
        state = np.zeros((1, 1), np.float32)
        names = ["total", "ended", "sequence", "ready"]
        for index, value in enumerate(values):
            inputs = {"x": np.full((1, 1), value, np.float32), "state": state}
            last = index == len(values) - 1
            result = client.infer(
                "accumulator",
                infer_inputs(module, inputs),
                outputs=[module.InferRequestedOutput(name) for name in names],
                sequence_id=wire_id,
                sequence_start=index == 0,
                sequence_end=last,
            )
            got = {name: result.as_numpy(name) for name in names}
            controls: dict[str, NDArray[Any]] = {
                "START": np.full((1, 1), int(index == 0), np.int32),
                "END": np.full((1, 1), int(last), np.int32),
                "CORRID": np.full((1, 1), wire_id, np.uint64),
                "READY": np.ones((1, 1), np.int32),
            }
            want = reference_outputs(files["accumulator"], {**inputs, **controls})
            for name in names:
                np.testing.assert_allclose(got[name], want[name], **SERVER_TOLERANCE)
            np.testing.assert_allclose(got["total"], [[values[: index + 1].sum()]], rtol=1e-5)
            state = got["total"]

    _concurrently([partial(sequence, p, s) for p in PROTOCOLS for s in steps])
