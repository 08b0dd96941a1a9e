"""The model plan is built without a session (from the ONNX file's tensors, as `triton-ort config` reads
them), agrees with the runner's view of the same model, and the small shared pieces keep their rules."""

from pathlib import Path

import onnxruntime as ort
import pytest

from tests.support import graphs
from tests.support.paths import demo_onnx
from triton_ort import IOBindingRunner, Placement
from triton_ort.errors import ConfigError
from triton_ort.hooks.module import Hooks
from triton_ort.model.autocomplete import read_onnx_signature
from triton_ort.model.load_checks import checked_options
from triton_ort.model.served_config import ServedConfig
from triton_ort.runtime.model_plan import ModelPlan
from triton_ort.runtime.output_placement import OutputPlacement
from triton_ort.runtime.run_plan import SIGNATURES_KEPT, BoundedSet

DEMO_CONFIG = {
    "name": "demo",
    "max_batch_size": 64,
    "input": [{"name": "np_script_embeddings", "data_type": "TYPE_FP32", "dims": [2010]}],
    "output": [{"name": "np_logits", "data_type": "TYPE_FP32", "dims": [2]}],
}


def offline_plan(path: Path, model_config: dict[str, object], graphs_on: bool) -> ModelPlan:
    config = ServedConfig.parse(model_config)
    options = checked_options(config)
    return ModelPlan.build(config, options, None, path, read_onnx_signature(path), graphs=graphs_on)


def test_a_plan_is_built_from_the_file_alone_and_pads_graphs_only_where_they_are_on() -> None:
    plan = offline_plan(demo_onnx(), DEMO_CONFIG, graphs_on=False)
    assert plan.gathers and plan.graph_rows == 0
    assert plan.output_names == ("np_logits",) and not plan.one_value and plan.client is None
    assert offline_plan(demo_onnx(), DEMO_CONFIG, graphs_on=True).graph_rows == 64


def test_a_graph_that_mixes_rows_is_neither_gathered_nor_padded(tmp_path: Path) -> None:
    path = graphs.quantized_mlp(tmp_path / "model.onnx")
    config = {
        "max_batch_size": 8,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [graphs.MLP_FEATURES]}],
        "output": [{"name": "logits", "data_type": "TYPE_FP32", "dims": [3]}],
    }
    plan = offline_plan(path, config, graphs_on=True)
    assert not plan.gathers and plan.graph_rows == 0


def test_the_runner_and_the_file_give_the_plan_the_same_decisions() -> None:
    runner = IOBindingRunner(
        ort.InferenceSession(str(demo_onnx()), providers=["CPUExecutionProvider"]), Placement("cpu")
    )
    config = ServedConfig.parse(DEMO_CONFIG)
    options = checked_options(config)
    from_session = ModelPlan.build(config, options, None, demo_onnx(), runner.signature, graphs=True)
    from_file = offline_plan(demo_onnx(), DEMO_CONFIG, graphs_on=True)
    assert (from_session.gathers, from_session.graph_rows) == (from_file.gathers, from_file.graph_rows)
    assert [s.name for s in runner.signature.inputs] == [s.name for s in from_file.signature.inputs]


def test_hooks_on_a_model_with_strings_are_refused_when_the_plan_is_built(tmp_path: Path) -> None:
    path = graphs.strings_beside_numbers(tmp_path / "model.onnx")
    config = ServedConfig.parse(
        {
            "max_batch_size": 8,
            "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [2]}],
            "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [2]}],
        }
    )
    hooks = Hooks(tmp_path / "hooks.py", preprocess=lambda inputs: inputs, postprocess=lambda out, inp: out)
    with pytest.raises(ConfigError, match="has string tensors"):
        ModelPlan.build(config, checked_options(config), hooks, path, read_onnx_signature(path), graphs=False)


def test_a_bounded_set_stops_growing_at_its_limit() -> None:
    kept: BoundedSet[int] = BoundedSet()
    for item in range(SIGNATURES_KEPT + 10):
        kept.keep(item)
    assert len(kept) == SIGNATURES_KEPT and 0 in kept and SIGNATURES_KEPT not in kept


@pytest.mark.parametrize(
    ("mode", "output_bytes", "to_host"),
    [
        ("device", 4, False),
        ("host", None, True),
        ("host", 1 << 30, True),
        ("auto", None, False),  # data-dependent sizes stay on the device
        ("auto", 64, True),
        ("auto", 65, False),
    ],
)
def test_the_one_output_placement_rule(mode: str, output_bytes: int | None, to_host: bool) -> None:
    assert OutputPlacement(mode, host_max_bytes=64).to_host(output_bytes) is to_host


@pytest.mark.parametrize("gather", ["", "yes"])
def test_a_graph_the_onnx_package_cannot_read_is_run_apart_and_the_load_says_why_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, gather: str
) -> None:
    """An ORT-format model: ORT serves it, the onnx package cannot read it to check whether its rows mix.
    The load says so once, with the error and the parameter that overrides the choice."""
    ort_file = tmp_path / "model.ort"
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(ort_file)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.add_session_config_entry("session.save_model_format", "ORT")
    ort.InferenceSession(str(demo_onnx()), options, providers=["CPUExecutionProvider"])
    runner = IOBindingRunner(
        ort.InferenceSession(str(ort_file), providers=["CPUExecutionProvider"]), Placement("cpu")
    )
    model_config = {
        **DEMO_CONFIG,
        "parameters": {"gather_requests": {"string_value": gather}} if gather else {},
    }
    config = ServedConfig.parse(model_config)
    with caplog.at_level("INFO", logger="triton_ort"):
        plan = ModelPlan.build(config, checked_options(config), None, ort_file, runner.signature, graphs=True)
    said = [r for r in caplog.records if "could not be read" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING", caplog.text
    message = said[0].getMessage()
    assert "Error parsing message" in message, message  # the onnx package's own words
    if gather:  # gathered as the parameter says; CUDA graphs get a graph per batch size, not padded ones
        assert plan.gathers and plan.graph_rows == 0
        assert "batches are not padded" in message and "no parameter pads them" in message
    else:
        assert not plan.gathers and plan.graph_rows == 0
        assert "not gathered" in message and "gather_requests: yes gathers them anyway" in message
