"""Models exported the usual way, served with the two-line config (plus the sequence batcher's control
inputs where a model has them), every answer compared with in-process ONNX Runtime over HTTP and gRPC with
concurrent requests: a scikit-learn classifier (its [N] label: dims [1] with an empty reshape, as the native
backend serves it), a BERT-style encoder, a NonZero detector that finds nothing, a LabelEncoder with
strings in and out beside numbers, and an accumulator under the sequence batcher with several interleaved
sequences. The models are built here (tests/support/exported.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from numpy.typing import NDArray

from tests.support import exported, graphs
from tests.support.exported import TWO_LINES, Exported, Served, check_answers, close, concurrently
from tests.support.paths import SERVER_TOLERANCE
from triton_ort.harness.reference import reference_outputs
from triton_ort.harness.server import LocalTritonServer
from triton_ort.harness.transport import PROTOCOLS, infer, infer_inputs, make_client, model_config
from triton_ort.model.autocomplete import DEFAULT_MAX_BATCH_SIZE

pytestmark = pytest.mark.integration

MODELS = {
    "sk_pipe": Exported(exported.sklearn_classifier, needs=("skl2onnx",)),
    "bert": Exported(exported.bert_encoder, needs=("transformers",)),
    "detector": Exported(graphs.nonzero, 'backend: "onnxruntime_zerocopy"\n'),
    # max_batch_size 0 written out: read as unset, filled with the default, and said so in the log.
    "explicit_zero": Exported(graphs.multi_io, 'backend: "onnxruntime_zerocopy"\nmax_batch_size: 0\n'),
    "accumulator": Exported(exported.accumulator, TWO_LINES + exported.SEQUENCE_CONFIG),
    "labels": Exported(graphs.label_encoder),
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repository = tmp_path_factory.mktemp("exported") / "repository"
    files, missing = exported.write_repository(repository, MODELS)
    with LocalTritonServer(repository) as server:
        yield Served(server, files, missing)


def test_a_sklearn_classifier_loads_with_two_lines_and_answers_like_onnx_runtime(served: Served) -> None:
    served.onnx_file("sk_pipe")
    config = model_config(make_client("http", served.url("http")), "sk_pipe")
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
        close(name, got, want)

    check_answers(served, "sk_pipe", requests * 4, compare)


def test_infer_expect_compares_onnx_runtimes_label_in_the_served_shape(
    served: Served, tmp_path: Path
) -> None:
    """`triton-ort infer --expect` with ONNX Runtime's own outputs of the classifier: its label [N] is
    answered [N, 1] (the config's reshape) and matches; a shape the config does not map still fails."""
    onnx_path = served.onnx_file("sk_pipe")
    x = np.random.default_rng(5).standard_normal((5, exported.FEATURES)).astype(np.float32)
    want = reference_outputs(onnx_path, {"X": x})
    assert want["label"].shape == (5,)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "expected.npz", **want)
    np.savez(tmp_path / "flat.npz", **{**want, "probabilities": want["probabilities"].reshape(-1)})
    command = [
        str(Path(sys.executable).parent / "triton-ort"),
        "infer",
        "sk_pipe",
        "--url",
        served.url("http"),
    ]
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


def test_a_bert_encoder_answers_like_onnx_runtime_at_several_batches_and_lengths(served: Served) -> None:
    rng = np.random.default_rng(2)
    requests = []
    for rows, length in ((1, 5), (2, 7), (4, 12), (3, 5)):
        mask = np.ones((rows, length), np.int64)
        mask[:, length - 2 :] = 0  # padding at the end, as a tokenizer pads
        requests.append(
            {"input_ids": rng.integers(0, exported.VOCAB, (rows, length)), "attention_mask": mask}
        )
    check_answers(served, "bert", requests * 3, close)


def test_a_detector_that_finds_nothing_answers_an_empty_tensor(served: Served) -> None:
    config = model_config(make_client("http", served.url("http")), "detector")
    assert int(config["max_batch_size"]) == 0  # NonZero's [2, ?] has no batch axis
    requests = [
        {"x": np.zeros((3, 4), np.float32)},  # nothing found: indices [2, 0]
        {"x": -np.ones((1, 4), np.float32)},
        {"x": np.array([[0, 1, 0, 0]], np.float32)},
    ]

    def compare(name: str, got: NDArray[Any], want: NDArray[Any]) -> None:
        assert got.shape == want.shape, (got.shape, want.shape)
        np.testing.assert_array_equal(got, want)

    check_answers(served, "detector", requests * 4, compare)


def test_strings_in_and_out_beside_numbers_answer_like_onnx_runtime(served: Served) -> None:
    """BYTES in (a LabelEncoder), BYTES and numbers out, numbers beside them; strings of different
    lengths (an empty one, one not in the labels, UTF-8) in requests of several sizes, some gathered into
    one execute by the dynamic batcher."""
    config = model_config(make_client("http", served.url("http")), "labels")
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
    session = ort.InferenceSession(str(served.onnx_file("labels")), providers=["CPUExecutionProvider"])
    names = ["id", "t", "y"]

    def one(protocol: str, inputs: dict[str, NDArray[Any]]) -> None:
        got, _ = infer(make_client(protocol, served.url(protocol)), "labels", inputs, names)
        text = np.vectorize(bytes.decode, otypes=[object])(inputs["s"])  # ORT takes str, not bytes
        want = dict(zip(names, session.run(names, {"s": text, "x": inputs["x"]}), strict=True))
        np.testing.assert_array_equal(got["id"], want["id"])
        np.testing.assert_array_equal(got["y"], want["y"])
        assert [[b.decode() for b in row] for row in got["t"]] == want["t"].tolist()

    concurrently([partial(one, p, r) for p in PROTOCOLS for r in requests * 3])


def test_an_explicit_max_batch_size_zero_is_filled_in_with_the_native_backends_warning(
    served: Served,
) -> None:
    config = model_config(make_client("http", served.url("http")), "explicit_zero")
    assert int(config["max_batch_size"]) == DEFAULT_MAX_BATCH_SIZE
    assert (
        f"autofilled max_batch_size to {DEFAULT_MAX_BATCH_SIZE} for model 'explicit_zero' since batching is "
        "supported" in served.server.log()
    )


def test_interleaved_sequences_under_the_sequence_batcher_get_their_own_running_sums(
    served: Served,
) -> None:
    """Sequences of different lengths, sent step by step from threads over both protocols at once; each
    step sends the previous total back as the state, and every answer is compared with ORT on the inputs
    that step saw (START and END as the sequence batcher sets them, CORRID the sequence's id)."""
    steps = {1000 + s: np.random.default_rng(s).standard_normal(3 + s).astype(np.float32) for s in range(6)}

    def sequence(protocol: str, sequence_id: int) -> None:
        module = PROTOCOLS[protocol]
        client = make_client(protocol, served.url(protocol))
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
            want = reference_outputs(served.onnx_file("accumulator"), {**inputs, **controls})
            for name in names:
                np.testing.assert_allclose(got[name], want[name], **SERVER_TOLERANCE)
            np.testing.assert_allclose(got["total"], [[values[: index + 1].sum()]], rtol=1e-5)
            state = got["total"]

    concurrently([partial(sequence, p, s) for p in PROTOCOLS for s in steps])
