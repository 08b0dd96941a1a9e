import pytest

from triton_ort import ConfigError, ModelOptions, parse_options
from triton_ort.model.options import parameters_from_model_config


def test_defaults_when_no_parameters() -> None:
    assert parse_options({}) == ModelOptions()


def test_values_are_parsed_and_backend_keys_ignored() -> None:
    options = parse_options(
        {
            "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
            "onnx_file": "net.onnx",
            "allow_cpu_fallback": "True",
            "gpu_mem_limit": "1073741824",
            "graph_optimization_level": "basic",
            "gather_requests": "0",
            "output_placement": "device",
            "host_output_max_bytes": "4096",
        }
    )
    assert (options.output_placement, options.host_output_max_bytes) == ("device", 4096)
    assert options.onnx_file == "net.onnx"
    assert options.allow_cpu_fallback is True
    assert options.gpu_mem_limit == 1 << 30
    assert options.graph_optimization_level == "basic"
    assert options.gather_requests is False


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"onnx_fil": "x.onnx"}, "unknown parameter 'onnx_fil'; did you mean 'onnx_file'?"),
        ({"warmpu": "1"}, "unknown parameter 'warmpu'; did you mean 'warmup'?"),
        ({"FORCE_CPU_ONLY_INPUT_TENSOR": "no"}, "did you mean 'FORCE_CPU_ONLY_INPUT_TENSORS'?"),
        ({"speed": "fast"}, "unknown parameter 'speed'; known parameters: EXECUTION_ENV_PATH"),
        ({"input_ranges": "ids=5:1"}, "parameter 'input_ranges': 'ids=5:1' is not NAME=LO:HI"),
        ({"allow_cpu_fallback": "maybe"}, "parameter 'allow_cpu_fallback': 'maybe' is not a boolean"),
        ({"gpu_mem_limit": "2GB"}, "parameter 'gpu_mem_limit': '2GB' is not a whole number"),
        ({"intra_op_num_threads": "-1"}, "parameter 'intra_op_num_threads': -1 is negative"),
        ({"graph_optimization_level": "max"}, "'max' is not one of disable, basic, extended, all"),
        ({"arena_extend_strategy": "grow"}, "'grow' is not one of 0 (kNextPowerOfTwo), 1 (kSameAsRequested)"),
        ({"onnx_file": " "}, "parameter 'onnx_file' is empty"),
        ({"output_placement": "gpu"}, "parameter 'output_placement': 'gpu' is not one of auto, device, host"),
        ({"host_output_max_bytes": "1MB"}, "parameter 'host_output_max_bytes': '1MB' is not a whole number"),
    ],
)
def test_bad_parameters_name_key_value_and_expectation(parameters: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_options(parameters)
    assert message in str(caught.value)


def test_parameters_come_from_triton_json() -> None:
    config = {"parameters": {"onnx_file": {"string_value": "a.onnx"}}}
    assert parameters_from_model_config(config) == {"onnx_file": "a.onnx"}
    assert parameters_from_model_config({}) == {}


def test_spinning_is_a_session_option() -> None:
    parameters = {"session.intra_op.allow_spinning": "true"}
    assert parse_options(parameters).allow_spinning is True
    assert ModelOptions().allow_spinning is None  # ModelInstance: off on CPU instances, ORT's elsewhere


@pytest.mark.parametrize(("raw", "value"), [("auto", None), ("AUTO", None), ("yes", True), ("no", False)])
def test_gather_requests_is_auto_by_default_or_forced_either_way(raw: str, value: bool | None) -> None:
    assert ModelOptions().gather_requests is None
    assert parse_options({"gather_requests": raw}).gather_requests is value


def test_a_bad_gather_requests_value_names_the_words_it_takes() -> None:
    with pytest.raises(
        ConfigError, match=r"parameter 'gather_requests': 'sometimes' is not a boolean or auto"
    ):
        parse_options({"gather_requests": "sometimes"})
