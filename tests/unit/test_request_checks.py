"""The CLI's request checks against a model's config, as tritonclient returns it in JSON."""

from __future__ import annotations

import numpy as np
import pytest

from triton_ort.cli.request_checks import ModelSignature, RequestError

# The demo's config as the HTTP endpoint returns it (fields Triton adds are ignored by the parser).
DEMO_INPUT = {"name": "np_script_embeddings", "data_type": "TYPE_FP32", "dims": [2010]}
DEMO_CONFIG = {
    "name": "demo",
    "max_batch_size": 1024,
    "input": [DEMO_INPUT],
    "output": [{"name": "np_logits", "data_type": "TYPE_FP32", "dims": [2]}],
    "instance_group": [{"kind": "KIND_CPU", "count": 1}],
    "some_field_of_a_later_release": True,
}
DEMO = ModelSignature.from_config(DEMO_CONFIG)


def test_config_json_from_http_and_grpc_parses_alike() -> None:
    # gRPC's as_json writes int64 as strings.
    grpc_style = {**DEMO_CONFIG, "input": [{**DEMO_INPUT, "dims": ["2010"]}]}
    assert ModelSignature.from_config(grpc_style) == DEMO
    assert DEMO.inputs[0].datatype == "FP32" and DEMO.inputs[0].dims == (2010,)


@pytest.mark.parametrize("batch", [1, 1024])
def test_batch_within_max_batch_size(batch: int) -> None:
    DEMO.check_batch(batch)


@pytest.mark.parametrize("batch", [0, 1025, 100_000])
def test_batch_outside_max_batch_size_names_the_range(batch: int) -> None:
    with pytest.raises(
        RequestError, match=rf"^--batch {batch}: expected 1 to 1024 \(max_batch_size of model 'demo'\)$"
    ):
        DEMO.check_batch(batch)


def test_a_model_without_batching_takes_no_batch() -> None:
    flat = ModelSignature("flat", 0, DEMO.inputs)
    flat.check_batch(1)
    with pytest.raises(RequestError, match="takes no batch axis"):
        flat.check_batch(4)
    assert flat.check_inputs({"np_script_embeddings": np.zeros(2010, np.float32)}) == 1


def test_inputs_of_the_right_shape_and_dtype_give_their_batch() -> None:
    assert DEMO.check_inputs({"np_script_embeddings": np.zeros((7, 2010), np.float32)}) == 7


@pytest.mark.parametrize(
    ("shape", "dtype", "message"),
    [
        ((2010,), np.float32, r"shape \[2010\], expected \[batch, 2010\] \(the first axis is the batch"),
        ((4, 2000), np.float32, r"shape \[4, 2000\], expected \[batch, 2010\]"),
        ((4, 2010, 1), np.float32, r"shape \[4, 2010, 1\], expected \[batch, 2010\]"),
        ((4, 2010), np.float64, r"dtype float64, expected float32 \(FP32\)"),
        ((0, 2010), np.float32, r"batch 0 \(the inputs' first axis\): expected 1 to 1024"),
        ((1025, 2010), np.float32, r"batch 1025 \(the inputs' first axis\): expected 1 to 1024"),
    ],
)
def test_a_wrong_input_is_one_line_naming_it(shape: tuple[int, ...], dtype: type, message: str) -> None:
    with pytest.raises(RequestError, match=message) as raised:
        DEMO.check_inputs({"np_script_embeddings": np.zeros(shape, dtype)})
    assert "\n" not in str(raised.value)


def test_unknown_input_names_the_inputs_there_are() -> None:
    with pytest.raises(RequestError, match=r"'x': model 'demo' has no such input; expected one of np_script"):
        DEMO.check_inputs({"x": np.zeros((1, 2010), np.float32)})


def test_variable_axes_take_any_size_and_inputs_must_agree_on_the_batch() -> None:
    config = {
        "name": "two",
        "max_batch_size": 8,
        "input": [
            {"name": "a", "data_type": "TYPE_INT64", "dims": [-1]},
            {"name": "b", "data_type": "TYPE_BOOL", "dims": [2]},
        ],
    }
    two = ModelSignature.from_config(config)
    assert two.check_inputs({"a": np.zeros((3, 17), np.int64), "b": np.zeros((3, 2), bool)}) == 3
    with pytest.raises(RequestError, match=r"inputs disagree on the batch .*: a 3, b 2"):
        two.check_inputs({"a": np.zeros((3, 17), np.int64), "b": np.zeros((2, 2), bool)})


CLASSIFIER = ModelSignature.from_config(
    {
        "name": "sk_pipe",
        "max_batch_size": 8,
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [
            # as the native backend and our auto-complete write a model's [N] output
            {"name": "label", "data_type": "TYPE_INT64", "dims": [1], "reshape": {"shape": []}},
            {"name": "probabilities", "data_type": "TYPE_FP32", "dims": [3]},
        ],
    }
)


def test_an_output_of_the_models_shape_is_viewed_as_the_config_reshapes_it() -> None:
    label = np.arange(5, dtype=np.int64)  # what ONNX Runtime answers: [N]
    served = CLASSIFIER.as_served("label", label, (5, 1))  # the server: [N, 1]
    assert served.shape == (5, 1) and np.array_equal(served.reshape(-1), label)
    assert CLASSIFIER.as_served("label", label.reshape(5, 1), (5, 1)).shape == (5, 1)  # already served


@pytest.mark.parametrize(
    ("name", "shape", "served"),
    [
        ("label", (10,), (5, 1)),  # another batch: not this reshape
        ("label", (5, 2), (5, 1)),
        ("probabilities", (15,), (5, 3)),  # no reshape in the config: no view of another shape
    ],
)
def test_only_the_configured_reshape_is_applied(
    name: str, shape: tuple[int, ...], served: tuple[int, ...]
) -> None:
    array = np.zeros(shape, np.float32)
    assert CLASSIFIER.as_served(name, array, served).shape == shape
