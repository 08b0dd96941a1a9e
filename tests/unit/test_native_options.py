"""The native onnxruntime backend's config vocabulary: same names, value formats and meanings
(onnxruntime_backend README.md and src/onnxruntime.cc), our older spellings as aliases, nothing ignored."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from triton_ort import ConfigError, ModelOptions, parse_options
from triton_ort.model.load_checks import checked_options
from triton_ort.model.served_config import ServedConfig

# What Triton core puts in every model config's `optimization` (seen in 23.12's JSON for a config without
# one): these must load as they are.
CORE_DEFAULTS: dict[str, Any] = {
    "priority": "PRIORITY_DEFAULT",
    "input_pinned_memory": {"enable": True},
    "output_pinned_memory": {"enable": True},
    "gather_kernel_buffer_threshold": 0,
    "eager_batching": False,
}


def accelerators(
    gpu: list[dict[str, Any]] | None = None, cpu: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        **CORE_DEFAULTS,
        "execution_accelerators": {
            "gpu_execution_accelerator": gpu or [],
            "cpu_execution_accelerator": cpu or [],
        },
    }


def test_core_defaults_alone_change_nothing() -> None:
    assert parse_options({}, CORE_DEFAULTS) == ModelOptions()
    assert parse_options({}, accelerators()) == ModelOptions()


@pytest.mark.parametrize(
    ("level", "ours"), [(-1, "basic"), (0, "all"), (1, "extended"), (2, "disable"), ("1", "extended")]
)
def test_graph_level_follows_the_native_mapping(level: object, ours: str) -> None:
    options = parse_options({}, {**CORE_DEFAULTS, "graph": {"level": level}})
    assert options.graph_optimization_level == ours


def test_native_parameters_keep_their_value_formats() -> None:
    options = parse_options(
        {
            "intra_op_thread_count": "3",
            "inter_op_thread_count": "2",
            "execution_mode": "1",
            "cudnn_conv_algo_search": "1",
            "arena_extend_strategy": "1",
            "gpu_mem_limit": "4294967200",
            "enable_mem_arena": "0",
            "enable_mem_pattern": "off",
            # gpu only: with enable_mem_arena 0 there is no CPU arena to name (refused, tested below)
            "memory.enable_memory_arena_shrinkage": "gpu:0",
            "session.use_device_allocator_for_initializers": "1",
            "do_copy_in_default_stream": "1",
        }
    )
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (3, 2)
    assert options.execution_mode == "parallel"
    assert options.cudnn_conv_algo_search == "HEURISTIC"
    assert options.arena_extend_strategy == "kSameAsRequested"
    assert options.gpu_mem_limit == 4294967200
    assert (options.enable_mem_arena, options.enable_mem_pattern) == (False, False)
    assert options.arena_shrinkage == "gpu:0"
    assert options.use_device_allocator_for_initializers is True


@pytest.mark.parametrize(("raw", "name"), [("0", "EXHAUSTIVE"), ("2", "DEFAULT"), ("HEURISTIC", "HEURISTIC")])
def test_cudnn_conv_algo_search_takes_native_numbers_and_ort_names(raw: str, name: str) -> None:
    assert parse_options({"cudnn_conv_algo_search": raw}).cudnn_conv_algo_search == name


def test_old_spellings_still_load_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="triton_ort"):
        options = parse_options(
            {"intra_op_num_threads": "4", "inter_op_num_threads": "1", "graph_optimization_level": "basic"}
        )
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (4, 1)
    assert options.graph_optimization_level == "basic"
    assert "'intra_op_num_threads' is deprecated; use intra_op_thread_count" in caplog.text
    assert "'graph_optimization_level' is deprecated; use optimization { graph { level" in caplog.text


@pytest.mark.parametrize(
    ("parameters", "optimization", "message"),
    [
        (
            {"intra_op_num_threads": "4", "intra_op_thread_count": "2"},
            None,
            "parameter intra_op_num_threads and parameter intra_op_thread_count set the same option",
        ),
        (
            {"graph_optimization_level": "all"},
            {"graph": {"level": 1}},
            "parameter graph_optimization_level and optimization.graph.level set the same option",
        ),
        (
            {"cuda_graph": "true"},
            {"cuda": {"graphs": True}},
            "parameter cuda_graph and optimization.cuda.graphs set the same option",
        ),
        (
            {"gpu_mem_limit": "1024"},
            {
                "execution_accelerators": {
                    "gpu_execution_accelerator": [{"name": "cuda", "parameters": {"gpu_mem_limit": "2048"}}]
                }
            },
            "parameter gpu_mem_limit and optimization.execution_accelerators.gpu_execution_accelerator[0] "
            "parameter 'gpu_mem_limit' set the same option",
        ),
    ],
)
def test_two_spellings_of_one_option_are_refused(
    parameters: dict[str, str], optimization: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(ConfigError, match="give only one of them") as caught:
        parse_options(parameters, optimization)
    assert message in str(caught.value)


def test_cuda_graphs_from_optimization() -> None:
    assert parse_options({}, {"cuda": {"graphs": True}}).cuda_graph is True
    assert parse_options({}, {"cuda": {"graphs": False, "busy_wait_events": False}}).cuda_graph is False


def test_tensorrt_accelerator_maps_to_the_trt_ep_options() -> None:
    trt = {
        "name": "tensorrt",
        "parameters": {
            "precision_mode": "FP16",
            "max_workspace_size_bytes": "1073741824",
            "trt_engine_cache_enable": "true",
            "trt_engine_cache_path": "/cache/trt",
            "trt_builder_optimization_level": "3",
            "int8_use_native_calibration_table": "0",
        },
    }
    options = parse_options({}, accelerators(gpu=[trt]))
    assert options.tensorrt_options == {
        "trt_fp16_enable": "1",
        "trt_max_workspace_size": "1073741824",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/cache/trt",
        "trt_builder_optimization_level": "3",
        "trt_int8_use_native_calibration_table": "0",
    }


@pytest.mark.parametrize(
    ("mode", "flag"),
    [("FP32", None), ("FP16", "trt_fp16_enable"), ("BF16", "trt_bf16_enable"), ("INT8", "trt_int8_enable")],
)
def test_precision_modes(mode: str, flag: str | None) -> None:
    options = parse_options(
        {}, accelerators(gpu=[{"name": "tensorrt", "parameters": {"precision_mode": mode}}])
    )
    assert options.tensorrt_options == ({flag: "1"} if flag else {})


def test_cuda_accelerator_options_pass_to_the_cuda_ep() -> None:
    cuda = {
        "name": "cuda",
        "parameters": {
            "cudnn_conv_use_max_workspace": "0",
            "use_ep_level_unified_stream": "true",
            "cudnn_conv_algo_search": "HEURISTIC",
            "arena_extend_strategy": "kSameAsRequested",
        },
    }
    options = parse_options({}, accelerators(gpu=[cuda]))
    assert options.cuda_options == {"cudnn_conv_use_max_workspace": "0", "use_ep_level_unified_stream": "1"}
    assert (options.cudnn_conv_algo_search, options.arena_extend_strategy) == (
        "HEURISTIC",
        "kSameAsRequested",
    )


def test_openvino_accelerator_is_recorded() -> None:
    assert parse_options({}, accelerators(cpu=[{"name": "openvino"}])).openvino is True


def test_options_from_a_whole_model_config() -> None:
    config = {
        "parameters": {"intra_op_thread_count": {"string_value": "2"}},
        "optimization": {**CORE_DEFAULTS, "graph": {"level": 2}},
    }
    options = checked_options_of(config)
    assert (options.intra_op_num_threads, options.graph_optimization_level) == (2, "disable")


def _gpu(name: str, **parameters: str) -> dict[str, Any]:
    return accelerators(gpu=[{"name": name, "parameters": parameters}])


@pytest.mark.parametrize(
    ("parameters", "optimization", "message"),
    [
        (
            {"execution_mode": "2"},
            None,
            "parameter 'execution_mode': '2' is not one of 0 (sequential), 1 (parallel)",
        ),
        (
            {"cudnn_conv_algo_search": "3"},
            None,
            "parameter 'cudnn_conv_algo_search': '3' is not one of 0 (EXHAUSTIVE), 1 (HEURISTIC), "
            "2 (DEFAULT)",
        ),
        ({"enable_mem_arena": "maybe"}, None, "parameter 'enable_mem_arena': 'maybe' is not a boolean"),
        (
            {"intra_op_thread_count": "two"},
            None,
            "parameter 'intra_op_thread_count': 'two' is not a whole number",
        ),
        (
            {"memory.enable_memory_arena_shrinkage": "gpu0"},
            None,
            "parameter 'memory.enable_memory_arena_shrinkage': 'gpu0' is not a list of devices",
        ),
        (
            {"do_copy_in_default_stream": "0"},
            None,
            "parameter 'do_copy_in_default_stream': '0' cannot apply here",
        ),
        (
            {},
            {"graph": {"level": 3}},
            "optimization.graph.level: 3 is not one of -1 (basic), 0 (all), 1 (extended)",
        ),
        ({}, {"graph": {"level": "high"}}, "optimization.graph.level: 'high' is not one of"),
        ({}, {"priority": "PRIORITY_MAX"}, "optimization.priority: 'PRIORITY_MAX' cannot apply here"),
        (
            {},
            {"gather_kernel_buffer_threshold": 8},
            "optimization.gather_kernel_buffer_threshold: 8 cannot apply",
        ),
        (
            {},
            {"cuda": {"busy_wait_events": True}},
            "optimization.cuda.busy_wait_events: True cannot apply here",
        ),
        ({}, {"cuda": {"graph_spec": [{"batch_size": 4}]}}, "optimization.cuda.graph_spec cannot apply here"),
        ({}, {"sparsity": True}, "optimization: unknown field 'sparsity'"),
        (
            {},
            _gpu("tensorrt", precision_mode="FP8"),
            "gpu_execution_accelerator[0] parameter 'precision_mode': 'FP8' is not one of FP32, FP16, "
            "BF16, INT8",
        ),
        (
            {},
            _gpu("tensorrt", max_workspace_size_bytes="1GB"),
            "parameter 'max_workspace_size_bytes': '1GB' is not a whole number",
        ),
        ({}, _gpu("tensorrt", trt_engine_cache_enable="yes please"), "'yes please' is not a boolean"),
        ({}, _gpu("tensorrt", trt_engine_cache_pth="/x"), "unknown optimization.execution_accelerators."),
        (
            {},
            _gpu("tensorrt", trt_cuda_graph_enable="1"),
            "parameter 'trt_cuda_graph_enable' cannot apply here",
        ),
        (
            {},
            _gpu("cuda", device_id="1"),
            "parameter 'device_id' cannot apply here: the device is the instance's",
        ),
        ({}, _gpu("cuda", enable_cuda_graph="1"), "use optimization { cuda { graphs: true } }"),
        ({}, _gpu("cuda", cudnn_conv_use_max_workspce="1"), "unknown optimization.execution_accelerators."),
        (
            {},
            _gpu("cuda", do_copy_in_default_stream="false"),
            "do_copy_in_default_stream': 'false' cannot apply",
        ),
        ({}, _gpu("openvino"), "gpu_execution_accelerator[0]: unknown execution accelerator 'openvino'"),
        (
            {},
            accelerators(cpu=[{"name": "openvino", "parameters": {"device_type": "GPU"}}]),
            "the openvino accelerator takes no parameters",
        ),
        (
            {},
            accelerators(cpu=[{"name": "dnnl"}]),
            "unknown execution accelerator 'dnnl' (expected openvino)",
        ),
        ({"cuda_graph": "true"}, _gpu("tensorrt"), "cannot be combined with the tensorrt accelerator"),
    ],
)
def test_bad_values_name_key_value_and_expectation(
    parameters: dict[str, str], optimization: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_options(parameters, optimization)
    assert message in str(caught.value)


def test_arena_shrinkage_without_the_arena_or_with_cuda_graphs_fails_the_load() -> None:
    with pytest.raises(ConfigError, match="no CPU arena to shrink"):
        parse_options({"memory.enable_memory_arena_shrinkage": "cpu:0", "enable_mem_arena": "0"})
    with pytest.raises(ConfigError, match="CUDA graphs"):
        parse_options({"memory.enable_memory_arena_shrinkage": "gpu:0", "cuda_graph": "true"})


def test_a_gpu_shrinkage_entry_does_not_fail_the_runs_of_a_cpu_instance() -> None:
    """One config serves instances of several kinds: `gpu:N` means the instance's own GPU, none on CPU
    (ORT fails a run that names an arena the session lacks)."""
    import torch

    from tests.support.paths import demo_instance_config, demo_onnx
    from triton_ort import ModelInstance

    config = demo_instance_config(
        8, intra_op_thread_count="1", **{"memory.enable_memory_arena_shrinkage": "cpu:0;gpu:0"}
    )
    instance = ModelInstance(config, demo_onnx().parent, "CPU", 0)
    (result,) = instance.infer([{"np_script_embeddings": torch.rand(2, 2010)}])
    assert isinstance(result, dict), result


def test_the_readmes_tf32_lines_turn_tf32_off_in_the_cuda_ep_options() -> None:
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    from tests.support.readme import readme_blocks

    block = readme_blocks()["tf32"]
    config = text_format.Parse('backend: "onnxruntime_zerocopy"\n' + block, model_config_pb2.ModelConfig())
    options = checked_options_of(json_format.MessageToDict(config, preserving_proto_field_name=True))
    assert options.cuda_options == {"use_tf32": "0"}, options


def checked_options_of(model_config: dict[str, Any]) -> ModelOptions:
    """The options a load reads from a model config (Triton's JSON)."""
    return checked_options(ServedConfig.parse(model_config))
