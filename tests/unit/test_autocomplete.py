"""triton_ort.model.autocomplete on ONNX files built here: what Triton's auto-complete receives, without
Triton."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests.support import graphs
from tests.support.python_backend import python_backend_utils
from triton_ort import ConfigError
from triton_ort.model.autocomplete import (
    DEFAULT_MAX_BATCH_SIZE,
    ZERO_COPY_LINE,
    apply_completed,
    complete_config,
    read_onnx_signature,
    zero_copy_warning,
)
from triton_ort.model.load_checks import one_value_inputs_note
from triton_ort.model.onnx_files import OPSET, readable_model, save_model
from triton_ort.model.served_config import ServedConfig
from triton_ort.model.signature import check_config

v = helper.make_tensor_value_info


def config(**fields: Any) -> dict[str, Any]:
    """A config as Triton hands a two-line config.pbtxt to auto_complete_config (empty lists, zeros)."""
    base: dict[str, Any] = {"name": "m", "backend": "onnxruntime_zerocopy", "max_batch_size": 0}
    base.update({"input": [], "output": [], "parameters": {}}, **fields)
    return base


@pytest.fixture
def multi_io(tmp_path: Path) -> Path:
    graphs.multi_io(tmp_path / "model.onnx")
    return tmp_path


def fixed_shape(path: Path) -> Path:
    """x float[1,3] -> y = x + x: no open first axis, so no batching."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        "fixed",
        [v("x", TensorProto.FLOAT, [1, 3])],
        [v("y", TensorProto.FLOAT, [1, 3])],
    )
    return graphs.save(graph, path)


def test_two_line_config_gets_every_tensor_and_the_default_batch(multi_io: Path) -> None:
    completed = complete_config(config(), multi_io)
    assert completed.max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert completed.dynamic_batching
    assert completed.inputs == (
        {"name": "a", "data_type": "TYPE_FP16", "dims": [3]},
        {"name": "b", "data_type": "TYPE_INT64", "dims": [4]},
        {"name": "c", "data_type": "TYPE_BOOL", "dims": [2]},
    )
    assert completed.outputs == (
        {"name": "a_twice", "data_type": "TYPE_FP16", "dims": [3]},
        {"name": "b_sum", "data_type": "TYPE_INT64", "dims": [1]},
        {"name": "c_not", "data_type": "TYPE_BOOL", "dims": [2]},
    )


def test_configured_max_batch_size_is_kept_and_scheduler_left_alone(multi_io: Path) -> None:
    completed = complete_config(config(max_batch_size=64, dynamic_batching={}), multi_io)
    assert completed.max_batch_size == 64
    assert not completed.dynamic_batching  # already there: set_dynamic_batching need not be called
    sequence = complete_config(config(max_batch_size=64, sequence_batching={}), multi_io)
    assert not sequence.dynamic_batching  # pb_utils refuses dynamic batching beside a sequence batcher


def test_a_config_with_hooks_is_served_as_written(multi_io: Path) -> None:
    """Hooks may rename, cast and reshape: the config's tensors are the clients', not the ONNX file's
    (a hooks module without declarations: tests/unit/test_hook_tensors.py has the declared ones)."""
    (multi_io / "hooks.py").write_text("def preprocess(inputs):\n    return inputs\n")
    hooked = config(
        max_batch_size=8,
        input=[{"name": "raw", "data_type": "TYPE_UINT8", "dims": [3]}],
        parameters={"hooks": {"string_value": "hooks.py"}},
    )
    completed = complete_config(hooked, multi_io)
    assert completed.inputs == () and completed.outputs == ()
    assert completed.max_batch_size == 8 and not completed.dynamic_batching


def test_max_batch_size_one_gets_no_dynamic_batcher(multi_io: Path) -> None:
    assert not complete_config(config(max_batch_size=1), multi_io).dynamic_batching


def test_fixed_first_axis_means_no_batching(tmp_path: Path) -> None:
    fixed_shape(tmp_path / "model.onnx")
    completed = complete_config(config(), tmp_path)
    assert completed.max_batch_size == 0 and not completed.dynamic_batching
    assert completed.inputs == ({"name": "x", "data_type": "TYPE_FP32", "dims": [1, 3]},)


def test_configured_max_batch_size_is_kept_even_on_a_fixed_first_axis(tmp_path: Path) -> None:
    fixed_shape(tmp_path / "model.onnx")  # check_config reports it at load: see test_signature.py
    assert complete_config(config(max_batch_size=8), tmp_path).max_batch_size == 8


def test_one_fixed_output_axis_means_no_batching_and_open_axes_are_minus_one(tmp_path: Path) -> None:
    graphs.nonzero(tmp_path / "model.onnx")  # x[batch,4] -> indices[2,?]
    completed = complete_config(config(), tmp_path)
    assert completed.max_batch_size == 0
    assert completed.inputs == ({"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 4]},)
    assert completed.outputs == ({"name": "indices", "data_type": "TYPE_INT64", "dims": [2, -1]},)


def test_full_rank_dims_in_the_config_keep_max_batch_size_zero(multi_io: Path) -> None:
    """A config written for max_batch_size 0 (dims with the batch axis) is not turned into a batched one."""
    whole = config(input=[{"name": "a", "data_type": "TYPE_FP16", "dims": [-1, 3]}])
    completed = complete_config(whole, multi_io)
    assert completed.max_batch_size == 0
    assert completed.inputs[0] == {"name": "a", "data_type": "TYPE_FP16", "dims": [-1, 3]}
    assert completed.inputs[1] == {"name": "b", "data_type": "TYPE_INT64", "dims": [-1, 4]}


def test_name_only_entries_are_filled_and_listed_outputs_are_the_ones_served(multi_io: Path) -> None:
    partial = config(
        input=[{"name": "b", "data_type": "TYPE_INVALID", "dims": []}],
        output=[{"name": "c_not", "data_type": "TYPE_INVALID", "dims": []}],
    )
    completed = complete_config(partial, multi_io)
    assert [entry["name"] for entry in completed.inputs] == ["a", "b", "c"]
    assert completed.outputs == ({"name": "c_not", "data_type": "TYPE_BOOL", "dims": [2]},)


def test_configured_entries_are_kept_for_the_load_time_check_to_report(multi_io: Path) -> None:
    """Auto-complete never fails on a conflict (see the module's docstring); ModelInstance's check does."""
    stated = {"name": "a", "data_type": "TYPE_FP32", "dims": [5]}
    wrong = config(max_batch_size=8, input=[stated])
    completed = complete_config(wrong, multi_io)
    assert completed.inputs[0] == stated
    merged = {**wrong, "input": list(completed.inputs), "output": list(completed.outputs)}
    inputs, outputs, _ = read_onnx_signature(multi_io / "model.onnx")
    with pytest.raises(ConfigError) as caught:
        check_config(ServedConfig.parse(merged), inputs, outputs)
    assert "input 'a': config says FP32, the ONNX file says FP16" in str(caught.value)
    assert "input 'a': axis 1 is 5 in config.pbtxt but 3 in the ONNX file" in str(caught.value)


def test_onnx_file_parameter_is_honoured_and_a_missing_file_named(multi_io: Path) -> None:
    (multi_io / "model.onnx").rename(multi_io / "other.onnx")
    named = config(parameters={"onnx_file": {"string_value": "other.onnx"}})
    assert complete_config(named, multi_io).max_batch_size == DEFAULT_MAX_BATCH_SIZE
    with pytest.raises(ConfigError, match=r"model\.onnx' does not exist \(parameter onnx_file"):
        complete_config(config(), multi_io)


def test_bad_parameters_fail_auto_complete_already(multi_io: Path) -> None:
    with pytest.raises(ConfigError, match="unknown parameter 'onnx_fle'"):
        complete_config(config(parameters={"onnx_fle": {"string_value": "x.onnx"}}), multi_io)


def test_weights_listed_as_graph_inputs_before_ir_4_are_not_request_inputs(tmp_path: Path) -> None:
    """Exporters for IR < 4 list every initializer among the graph inputs; ONNX Runtime lets a request
    override none of them."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["y"])],
        "old_style",
        [v("x", TensorProto.FLOAT, ["n", 2]), v("bias", TensorProto.FLOAT, [2])],
        [v("y", TensorProto.FLOAT, ["n", 2])],
        initializer=[helper.make_tensor("bias", TensorProto.FLOAT, [2], [1.0, 2.0])],
    )
    path = save_model(graph, tmp_path / "model.onnx", opset=8)  # opset 8: IR 3
    assert onnx.load(str(path)).ir_version == 3
    inputs, _, overridable = read_onnx_signature(path)
    assert [spec.name for spec in inputs] == ["x"] and overridable == ()
    assert ort.InferenceSession(str(path)).get_overridable_initializers() == []
    assert [entry["name"] for entry in complete_config(config(), tmp_path).inputs] == ["x"]


def test_an_overridable_initializer_is_an_optional_input(tmp_path: Path) -> None:
    """scale[1] (one value per request: its whole shape) and offset[batch, 4] (batched like any input)
    have defaults a request may override: both are optional inputs. With max_batch_size set in the
    config, scale is sent with the batch axis like every input, the same value in each row."""
    path = graphs.overridable(tmp_path / "model.onnx")
    session = ort.InferenceSession(str(path))
    assert [arg.name for arg in session.get_overridable_initializers()] == ["scale", "offset"]
    completed = complete_config(config(max_batch_size=8), tmp_path)
    assert completed.max_batch_size == 8 and completed.dynamic_batching
    assert completed.inputs == (
        {"name": "x", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "scale", "data_type": "TYPE_FP32", "dims": [1], "optional": True},
        {"name": "offset", "data_type": "TYPE_FP32", "dims": [4], "optional": True},
    )
    merged = {**config(max_batch_size=completed.max_batch_size), "input": list(completed.inputs)}
    served = ServedConfig.parse({**merged, "output": list(completed.outputs)})
    check_config(served, *read_onnx_signature(path))
    note = one_value_inputs_note(served, read_onnx_signature(path).overridable)
    assert note is not None and "max_batch_size 8 is set in config.pbtxt" in note
    assert "'scale' as [rows, 1]" in note and "offset" not in note


def test_a_fixed_size_default_keeps_a_config_without_max_batch_size_unbatched(tmp_path: Path) -> None:
    """The native backend batches only when every input and output has an open first axis; `scale [1]`
    is an input here (a request may send it), so without max_batch_size the model is not batched and a
    request sends every tensor in the ONNX file's shape: x [3, 4] and scale [1] together."""
    path = graphs.overridable(tmp_path / "model.onnx")
    for written in (config(), config(max_batch_size=0)):
        completed = complete_config(written, tmp_path)
        assert completed.max_batch_size == 0 and not completed.dynamic_batching
        assert [(e["name"], e["dims"]) for e in completed.inputs] == [
            ("x", [-1, 4]),
            ("scale", [1]),
            ("offset", [-1, 4]),
        ]
        assert [e["dims"] for e in completed.outputs] == [[-1, 4]]
        served = ServedConfig.parse(
            {**written, "input": list(completed.inputs), "output": list(completed.outputs)}
        )
        check_config(served, *read_onnx_signature(path))
        assert one_value_inputs_note(served, read_onnx_signature(path).overridable) is None
    # A default with an open first axis (offset [batch, 4]) does not stop batching.
    temperature = tmp_path / "t" / "model.onnx"
    from tests.support.exported_edge_cases import temperature_classifier

    temperature_classifier(temperature)
    assert complete_config(config(), temperature.parent).max_batch_size == DEFAULT_MAX_BATCH_SIZE


def test_an_overridable_scalar_is_served_as_one_value_with_or_without_batching(tmp_path: Path) -> None:
    path = graphs.scalar_default(tmp_path / "model.onnx")
    for max_batch_size, x_dims in ((8, [2]), (0, [-1, 2])):
        written = config(
            max_batch_size=max_batch_size, input=[{"name": "x", "data_type": "TYPE_FP32", "dims": x_dims}]
        )
        completed = complete_config(written, tmp_path)
        assert completed.inputs[1] == {"name": "t", "data_type": "TYPE_FP32", "dims": [1], "optional": True}
        merged = {**written, "input": list(completed.inputs), "output": list(completed.outputs)}
        # Triton's [1] is the scalar's one value
        check_config(ServedConfig.parse(merged), *read_onnx_signature(path))


def test_a_written_overridable_input_is_kept_as_written_and_checked(tmp_path: Path) -> None:
    """Listed without `optional: true` (Triton's JSON then says false), the input stays required, and
    pb_utils takes the completed entry; wrong dims are reported at load like any input's."""
    import json

    path = graphs.overridable(tmp_path / "model.onnx")
    scale = {"name": "scale", "data_type": "TYPE_FP32", "dims": [1], "optional": False}
    written = config(max_batch_size=8, input=[scale])
    completed = complete_config(written, tmp_path)
    assert completed.inputs[1] == scale
    assert completed.inputs[2]["optional"] is True  # offset, not written: optional
    pb_utils = python_backend_utils()
    apply_completed(pb_utils.ModelConfig(json.dumps(written)), completed)  # no conflict on `optional`
    wrong = {
        **written,
        "input": [{**scale, "dims": [2]}, *completed.inputs[::2]],
        "output": list(completed.outputs),
    }
    with pytest.raises(
        ConfigError, match=r"input 'scale': axis 0 is 2 in config.pbtxt but 1 in the ONNX file"
    ):
        check_config(ServedConfig.parse(wrong), *read_onnx_signature(path))


def test_the_offline_config_shows_an_overridable_input_as_optional(tmp_path: Path) -> None:
    from triton_ort.cli.config import completed_config

    graphs.overridable(tmp_path / "m" / "1" / "model.onnx")
    (tmp_path / "m" / "config.pbtxt").write_text('backend: "onnxruntime_zerocopy"\n')
    completed, notes = completed_config(tmp_path / "m")
    assert completed.max_batch_size == 0  # scale [1] has no batch axis: not batched, as native decides
    assert [(t.name, list(t.dims), t.optional) for t in completed.input] == [
        ("x", [-1, 4], False),
        ("scale", [1], True),
        ("offset", [-1, 4], True),
    ]
    assert not any("one value per request" in note for note in notes)
    (tmp_path / "m" / "config.pbtxt").write_text('backend: "onnxruntime_zerocopy"\nmax_batch_size: 8\n')
    completed, notes = completed_config(tmp_path / "m")
    assert [list(t.dims) for t in completed.input] == [[4], [1], [4]]
    assert [note for note in notes if "'scale' as [rows, 1]" in note]


def test_string_tensors_complete_as_type_string(tmp_path: Path) -> None:
    """Triton's config names strings TYPE_STRING (BYTES on the wire), as the native backend writes them."""
    completed = complete_config(
        {"max_batch_size": 4}, graphs.strings_beside_numbers(tmp_path / "model.onnx").parent
    )
    types = {entry["name"]: entry["data_type"] for entry in (*completed.inputs, *completed.outputs)}
    assert types == {"s": "TYPE_STRING", "x": "TYPE_FP32", "t": "TYPE_STRING", "y": "TYPE_FP32"}


def test_unreadable_files_are_refused_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "broken.onnx").write_bytes(b"not a protobuf at all")
    with pytest.raises(ConfigError, match="is not a readable ONNX file"):
        read_onnx_signature(tmp_path / "broken.onnx")


def test_an_empty_file_is_refused_as_unreadable_not_read_as_a_model_without_tensors(tmp_path: Path) -> None:
    """The onnx package parses zero bytes as an empty ModelProto; ONNX Runtime refuses it at load."""
    (tmp_path / "model.onnx").write_bytes(b"")
    with pytest.raises(ConfigError, match="is not a readable ONNX file: it holds no graph"):
        read_onnx_signature(tmp_path / "model.onnx")


def test_tensor_without_shape_asks_for_dims(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "no_shape",
        [v("x", TensorProto.FLOAT, None)],
        [v("y", TensorProto.FLOAT, None)],
    )
    # not through graphs.save: onnx's checker refuses a tensor type without a shape, which is the point here
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.save(readable_model(model), str(tmp_path / "model.onnx"))
    with pytest.raises(ConfigError, match="'x' has no shape in the graph"):
        read_onnx_signature(tmp_path / "model.onnx")


def batch_only(path: Path) -> Path:
    """What skl2onnx writes for a classifier (zipmap off): X[N,4] -> label int64[N], probabilities[N,3]."""
    graph = helper.make_graph(
        [
            helper.make_node("ArgMax", ["X"], ["label"], axis=1, keepdims=0),
            helper.make_node("Slice", ["X", "starts", "ends", "axes"], ["X3"]),
            helper.make_node("Softmax", ["X3"], ["probabilities"], axis=1),
        ],
        "classifier",
        [v("X", TensorProto.FLOAT, [None, 4])],
        [v("label", TensorProto.INT64, [None]), v("probabilities", TensorProto.FLOAT, [None, 3])],
        initializer=[
            helper.make_tensor("starts", TensorProto.INT64, [1], [0]),
            helper.make_tensor("ends", TensorProto.INT64, [1], [3]),
            helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
        ],
    )
    return graphs.save(graph, path)


def test_a_batch_only_tensor_gets_dims_one_and_an_empty_reshape_as_the_native_backend_writes(
    tmp_path: Path,
) -> None:
    batch_only(tmp_path / "model.onnx")
    completed = complete_config(config(), tmp_path)
    assert completed.max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert completed.outputs[0] == {
        "name": "label",
        "data_type": "TYPE_INT64",
        "dims": [1],
        "reshape": {"shape": []},
    }
    assert "reshape" not in completed.outputs[1]
    merged = {**config(max_batch_size=4), "input": list(completed.inputs), "output": list(completed.outputs)}
    # what the load then checks
    check_config(ServedConfig.parse(merged), *read_onnx_signature(tmp_path / "model.onnx"))


def test_without_batching_a_batch_only_tensor_is_minus_one_and_needs_no_reshape(tmp_path: Path) -> None:
    batch_only(tmp_path / "model.onnx")
    whole = config(input=[{"name": "X", "data_type": "TYPE_FP32", "dims": [-1, 4]}])
    completed = complete_config(whole, tmp_path)
    assert completed.max_batch_size == 0
    assert completed.outputs[0] == {"name": "label", "data_type": "TYPE_INT64", "dims": [-1]}


def test_a_config_dims_one_without_reshape_fails_the_load_naming_the_line_to_add(tmp_path: Path) -> None:
    batch_only(tmp_path / "model.onnx")
    written = config(
        max_batch_size=8,
        input=[{"name": "X", "data_type": "TYPE_FP32", "dims": [4]}],
        output=[{"name": "label", "data_type": "TYPE_INT64", "dims": [1]}],
    )
    with pytest.raises(ConfigError) as caught:
        check_config(ServedConfig.parse(written), *read_onnx_signature(tmp_path / "model.onnx"))
    assert "output 'label': config shape [-1, 1]" in str(caught.value)
    assert 'write it as { name: "label" ... dims: [ 1 ] reshape: { shape: [ ] } }' in str(caught.value)


def test_the_default_max_batch_size_is_logged_as_the_native_backend_does(
    multi_io: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="triton_ort.model.autocomplete"):
        complete_config(config(max_batch_size=0), multi_io)
    assert "autofilled max_batch_size to 4 for model 'm' since batching is supported" in caplog.text
    assert "an explicit max_batch_size: 0 reads as unspecified" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="triton_ort.model.autocomplete"):
        complete_config(config(max_batch_size=8), multi_io)  # set: nothing to say
        complete_config(config(input=[{"name": "a", "data_type": "TYPE_FP16", "dims": [-1, 3]}]), multi_io)
    assert caplog.text == ""


def stateful(path: Path) -> Path:
    """x float[b,1], START int32[b,1], CORRID uint64[b,1] -> y = x * (1 - START): control inputs as inputs."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["START"], ["start_f"], to=TensorProto.FLOAT),
            helper.make_node("Sub", ["one", "start_f"], ["keep"]),
            helper.make_node("Mul", ["x", "keep"], ["y"]),
            helper.make_node("Identity", ["CORRID"], ["corrid"]),
        ],
        "stateful",
        [
            v("x", TensorProto.FLOAT, ["batch", 1]),
            v("START", TensorProto.INT32, ["batch", 1]),
            v("CORRID", TensorProto.UINT64, ["batch", 1]),
        ],
        [v("y", TensorProto.FLOAT, ["batch", 1]), v("corrid", TensorProto.UINT64, ["batch", 1])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])],
    )
    return graphs.save(graph, path)


def sequence_batching(start_field: str = "int32_false_true") -> dict[str, Any]:
    """As Triton's JSON has it: every field of a control, the unused ones empty."""
    control = {
        "int32_false_true": [],
        "fp32_false_true": [],
        "bool_false_true": [],
        "data_type": "TYPE_INVALID",
    }
    return {
        "control_input": [
            {
                "name": "START",
                "control": [{**control, "kind": "CONTROL_SEQUENCE_START", start_field: [0, 1]}],
            },
            {
                "name": "CORRID",
                "control": [{**control, "kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_UINT64"}],
            },
        ],
        "state": [],
    }


def test_control_inputs_are_left_to_the_sequence_batcher_and_checked_against_the_file(tmp_path: Path) -> None:
    stateful(tmp_path / "model.onnx")
    sequenced = config(max_batch_size=8, sequence_batching=sequence_batching())
    completed = complete_config(sequenced, tmp_path)
    assert [entry["name"] for entry in completed.inputs] == ["x"]
    assert not completed.dynamic_batching
    merged = {**sequenced, "input": list(completed.inputs), "output": list(completed.outputs)}
    signature = read_onnx_signature(tmp_path / "model.onnx")
    check_config(ServedConfig.parse(merged), *signature)
    wrong = {**merged, "sequence_batching": sequence_batching("fp32_false_true")}
    with pytest.raises(ConfigError) as caught:
        check_config(ServedConfig.parse(wrong), *signature)
    assert "input 'START' (sequence_batching control CONTROL_SEQUENCE_START): the control sends FP32" in str(
        caught.value
    )


def test_implicit_state_is_refused_saying_why(tmp_path: Path) -> None:
    stateful(tmp_path / "model.onnx")
    with_state = {**sequence_batching(), "state": [{"input_name": "x", "output_name": "y"}]}
    sequenced = config(max_batch_size=8, sequence_batching=with_state)
    completed = complete_config(sequenced, tmp_path)
    merged = {**sequenced, "input": list(completed.inputs), "output": list(completed.outputs)}
    with pytest.raises(
        ConfigError, match=r"sequence_batching.state \(implicit state, inputs \['x'\]\) is not"
    ):
        check_config(ServedConfig.parse(merged), *read_onnx_signature(tmp_path / "model.onnx"))


def test_the_reshape_reaches_what_the_stub_sends_back_through_the_real_model_config(tmp_path: Path) -> None:
    """pb_utils.ModelConfig.add_output refuses a reshape key; apply_completed writes it where the stub
    reads the whole config back (json.dumps of ModelConfig._model_config, pb_stub.cc)."""
    import json

    pb_utils = python_backend_utils()
    batch_only(tmp_path / "model.onnx")
    raw = config()
    triton_config = pb_utils.ModelConfig(json.dumps(raw))
    with pytest.raises(ValueError, match="contains property other than"):
        triton_config.add_output({"name": "label", "data_type": "TYPE_INT64", "dims": [1], "reshape": {}})
    apply_completed(triton_config, complete_config(raw, tmp_path))
    sent = json.loads(json.dumps(triton_config._model_config))
    assert sent["max_batch_size"] == DEFAULT_MAX_BATCH_SIZE and sent["dynamic_batching"] == {}
    label = next(entry for entry in sent["output"] if entry["name"] == "label")
    assert label == {"name": "label", "data_type": "TYPE_INT64", "dims": [1], "reshape": {"shape": []}}


def test_a_gpu_host_is_told_the_line_that_makes_gpu_inputs_zero_copy() -> None:
    warning = zero_copy_warning(config(), gpu_visible=True)
    assert warning is not None and warning.endswith(ZERO_COPY_LINE), warning
    assert "'m'" in warning and "copied to the host" in warning
    group = {"instance_group": [{"kind": "KIND_GPU", "count": 2}]}
    assert zero_copy_warning(config(**group), gpu_visible=True) == warning


@pytest.mark.parametrize(
    ("fields", "gpu_visible"),
    [
        ({}, False),  # a CPU host: inputs are on the host anyway
        ({"instance_group": [{"kind": "KIND_CPU", "count": 1}]}, True),
        ({"parameters": {"FORCE_CPU_ONLY_INPUT_TENSORS": {"string_value": "no"}}}, True),
        ({"parameters": {"FORCE_CPU_ONLY_INPUT_TENSORS": {"string_value": "yes"}}}, True),  # chosen
    ],
)
def test_no_zero_copy_warning_where_inputs_stay_on_the_host_anyway_or_the_config_decides(
    fields: dict[str, Any], gpu_visible: bool
) -> None:
    assert zero_copy_warning(config(**fields), gpu_visible=gpu_visible) is None


def test_the_zero_copy_line_parses_as_the_parameter_it_names() -> None:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    parsed = text_format.Parse(ZERO_COPY_LINE, model_config_pb2.ModelConfig())
    assert parsed.parameters["FORCE_CPU_ONLY_INPUT_TENSORS"].string_value == "no"


def test_a_zipmap_output_is_refused_with_the_converter_option_that_avoids_it(tmp_path: Path) -> None:
    """skl2onnx's classifiers end in ZipMap, whose output is a sequence of maps, not a tensor."""
    probabilities = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    )
    graph = helper.make_graph(
        [
            helper.make_node(
                "ZipMap", ["x"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[0, 1]
            )
        ],
        "classifier",
        [v("x", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_value_info("probabilities", probabilities)],
    )
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.ml", 3)]
    onnx.save(readable_model(helper.make_model(graph, opset_imports=opsets)), str(tmp_path / "model.onnx"))
    with pytest.raises(ConfigError, match=r"'probabilities' is a sequence.*options=\{'zipmap': False\}"):
        complete_config(config(), tmp_path)


def test_an_ort_sequence_type_names_the_zipmap_option_too() -> None:
    from triton_ort.model.dtypes import from_onnx_type

    with pytest.raises(ConfigError, match=r"seq\(map\(int64,tensor\(float\)\)\).*'zipmap': False"):
        from_onnx_type("seq(map(int64,tensor(float)))", "ONNX output 'output_probability'")
