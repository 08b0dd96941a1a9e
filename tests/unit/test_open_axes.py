"""One rule and one message for open axes in infer, perf and tune (request_data.open_axes_error): every open
axis beyond the batch axis is sized by --shape or by given data; the inputs nothing sizes are named all at
once, with --shape options ready to paste. infer alone, given nothing at all (the README's first request of
any model), sends length 1 on every open axis and says so in one line on stderr."""

from __future__ import annotations

from typing import Any

import pytest

from triton_ort.cli.infer import _load_inputs, build_parser
from triton_ort.cli.request_checks import ModelSignature, RequestError
from triton_ort.cli.request_data import build_requests

NAMES = ("input_ids", "attention_mask", "token_type_ids")
METADATA = {
    "inputs": [{"name": name, "datatype": "INT64", "shape": [-1, -1]} for name in NAMES],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}],
}
CONFIG = {
    "name": "bert",
    "max_batch_size": 8,
    "input": [{"name": name, "data_type": "TYPE_INT64", "dims": [-1]} for name in NAMES],
}
SIGNATURE = ModelSignature.from_config(CONFIG)
PASTE_ALL = "--shape input_ids:16 --shape attention_mask:16 --shape token_type_ids:16"
PASTE_REST = "--shape attention_mask:16 --shape token_type_ids:16"


def _infer(*args: str) -> dict[str, Any]:
    parsed = build_parser("triton-ort").parse_args(["infer", "bert", *args])
    return _load_inputs(parsed, SIGNATURE, METADATA, CONFIG)


def test_perf_and_tune_name_every_unsized_input_at_once_with_shapes_to_paste() -> None:
    with pytest.raises(RequestError) as refused:
        build_requests(SIGNATURE, METADATA, 4)
    message = str(refused.value)
    assert all(f"'{name}' [any]" in message for name in NAMES) and PASTE_ALL in message, message
    with pytest.raises(RequestError) as rest:
        build_requests(SIGNATURE, METADATA, 4, ["input_ids:16"])
    assert PASTE_REST in str(rest.value) and "'input_ids'" not in str(rest.value)
    with pytest.raises(RequestError, match=r"their data \(--input-data FILE\)$"):  # tune's data option
        build_requests(SIGNATURE, METADATA, 4, data_options="--input-data FILE")
    [inputs], _ = build_requests(
        SIGNATURE, METADATA, 4, ["input_ids:16", "attention_mask:16", "token_type_ids:8"]
    )
    assert inputs["token_type_ids"].shape == (4, 8)


def test_infer_beside_a_shape_refuses_with_the_same_message() -> None:
    with pytest.raises(RequestError) as refused:
        _infer("--shape", "input_ids:16")
    message = str(refused.value)
    assert PASTE_REST in message and "--input NAME=FILE.npy" in message, message
    with pytest.raises(RequestError) as perfs:
        build_requests(SIGNATURE, METADATA, 1, ["input_ids:16"])
    assert message.partition("(dims")[0] == str(perfs.value).partition("(dims")[0]  # one message


def test_infer_given_nothing_sends_length_one_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    inputs = _infer("--batch", "2")
    assert {name: array.shape for name, array in inputs.items()} == dict.fromkeys(NAMES, (2, 1))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "1 long" in lines[0] and PASTE_ALL in lines[0], lines
    _infer(*(f"--shape={name}:5" for name in NAMES))
    assert capsys.readouterr().err == ""
