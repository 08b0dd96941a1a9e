from typing import Any

import pytest

from triton_ort import ConfigError
from triton_ort.model.dtypes import from_onnx_type, from_triton_type
from triton_ort.model.served_config import ServedConfig
from triton_ort.model.signature import TensorSpec, check_config

FP32 = from_onnx_type("tensor(float)", "x")
INPUTS = (TensorSpec("np_script_embeddings", FP32, ("batch", 2010)),)
OUTPUTS = (TensorSpec("np_logits", FP32, ("batch", 2)),)


def config(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "max_batch_size": 8,
        "input": [{"name": "np_script_embeddings", "data_type": "TYPE_FP32", "dims": ["2010"]}],
        "output": [{"name": "np_logits", "data_type": "TYPE_FP32", "dims": [2]}],
    }
    base.update(changes)
    return base


def problems(model_config: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        check_config(ServedConfig.parse(model_config), INPUTS, OUTPUTS)
    return str(caught.value)


def test_matching_config_passes() -> None:
    check_config(ServedConfig.parse(config()), INPUTS, OUTPUTS)


def test_dtype_mismatch_names_both_sides() -> None:
    bad = config(output=[{"name": "np_logits", "data_type": "TYPE_FP16", "dims": [2]}])
    assert "output 'np_logits': config says FP16, the ONNX file says FP32 (float)" in problems(bad)


def test_inner_dimension_mismatch() -> None:
    bad = config(input=[{"name": "np_script_embeddings", "data_type": "TYPE_FP32", "dims": [2000]}])
    assert (
        "input 'np_script_embeddings': axis 1 is 2000 in config.pbtxt but 2010 in the ONNX file"
        in problems(bad)
    )


def test_rank_mismatch_when_batching_is_off() -> None:
    message = problems(config(max_batch_size=0))
    assert "has rank 1, the ONNX file's [batch, 2010] has rank 2" in message


def test_missing_and_unknown_names() -> None:
    bad = config(
        input=[{"name": "embeddings", "data_type": "TYPE_FP32", "dims": [2010]}],
        output=[{"name": "probabilities", "data_type": "TYPE_FP32", "dims": [2]}],
    )
    message = problems(bad)
    assert "ONNX input 'np_script_embeddings' is missing from config.pbtxt" in message
    assert (
        "config input 'embeddings' is not in the ONNX file, whose inputs are ['np_script_embeddings']"
        in message
    )
    assert "config output 'probabilities' is not in the ONNX file" in message


def test_static_batch_axis_with_batching() -> None:
    fixed = (TensorSpec("np_script_embeddings", FP32, (1, 2010)),)
    with pytest.raises(ConfigError, match="needs a dynamic first axis, but the ONNX file fixes it to 1"):
        check_config(ServedConfig.parse(config()), fixed, OUTPUTS)


def test_unknown_triton_type() -> None:
    bad = config(input=[{"name": "np_script_embeddings", "data_type": "TYPE_FP8", "dims": [2010]}])
    with pytest.raises(ConfigError, match="data_type 'TYPE_FP8'; supported: BF16, BOOL"):
        check_config(ServedConfig.parse(bad), INPUTS, OUTPUTS)


def test_string_tensors_are_bytes_with_no_torch_dtype() -> None:
    strings = from_onnx_type("tensor(string)", "ONNX input 'text'")
    assert (strings.triton_name, strings.config_name, strings.is_string) == ("BYTES", "TYPE_STRING", True)
    assert from_triton_type("TYPE_STRING", "config input 'text'") is strings


SCALE = TensorSpec("scale", FP32, (1,))  # an overridable input without a batch axis


def test_an_overridable_input_may_be_listed_or_left_out_but_a_required_one_is_never_optional() -> None:
    check_config(ServedConfig.parse(config()), INPUTS, OUTPUTS, overridable=(SCALE,))
    scale = {"name": "scale", "data_type": "TYPE_FP32", "dims": [1], "optional": True}
    inputs = [*config()["input"], scale]
    check_config(ServedConfig.parse(config(input=inputs)), INPUTS, OUTPUTS, overridable=(SCALE,))
    required_optional = [{**config()["input"][0], "optional": True}, scale]
    with pytest.raises(ConfigError) as caught:
        served = ServedConfig.parse(config(input=required_optional))
        check_config(served, INPUTS, OUTPUTS, overridable=(SCALE,))
    assert "input 'np_script_embeddings' is optional in config.pbtxt, but the ONNX file needs it" in str(
        caught.value
    )
    with pytest.raises(ConfigError, match="config input 'scale' is not in the ONNX file"):
        # a graph whose scale is no input
        check_config(ServedConfig.parse(config(input=inputs)), INPUTS, OUTPUTS)
