"""IOBindingRunner against plain session.run(): same numbers, every dtype, clear input errors."""

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from numpy.typing import NDArray
from onnx import TensorProto

from tests.support import graphs
from tests.support.dlpack_layout import python_backend_accepts
from tests.support.paths import demo_onnx
from triton_ort import InputError, IOBindingRunner, Placement
from triton_ort.runtime import run_plan_cache as run_plan_cache_module
from triton_ort.runtime.ort_errors import mismatched_outputs
from triton_ort.runtime.output_placement import OutputPlacement
from triton_ort.runtime.tensor_checks import signature_of

CPU = Placement("cpu")


def runner_for(path: Path) -> IOBindingRunner:
    return IOBindingRunner(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), CPU)


def session_run(path: Path, inputs: dict[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs), strict=True))


def test_demo_matches_session_run() -> None:
    x = torch.randn(5, 2010)
    got = runner_for(demo_onnx()).run({"np_script_embeddings": x})
    want = session_run(demo_onnx(), {"np_script_embeddings": x.numpy()})
    assert got["np_logits"].shape == (5, 2)
    np.testing.assert_array_equal(got["np_logits"].numpy(), want["np_logits"])


def test_several_inputs_and_outputs_int64_bool_fp16(tmp_path: Path) -> None:
    path = graphs.multi_io(tmp_path / "m.onnx")
    inputs = {
        "a": torch.randn(3, 3).half(),
        "b": torch.randint(-50, 50, (3, 4), dtype=torch.int64),
        "c": torch.rand(3, 2) > 0.5,
    }
    got = runner_for(path).run(inputs)
    want = session_run(path, {k: v.numpy() for k, v in inputs.items()})
    assert set(got) == {"a_twice", "b_sum", "c_not"}
    for name, expected in want.items():
        assert got[name].numpy().dtype == expected.dtype
        np.testing.assert_array_equal(got[name].numpy(), expected)


ALL_TYPES = [
    (TensorProto.FLOAT, torch.float32),
    (TensorProto.DOUBLE, torch.float64),
    (TensorProto.FLOAT16, torch.float16),
    (TensorProto.BFLOAT16, torch.bfloat16),
    (TensorProto.BOOL, torch.bool),
    (TensorProto.INT8, torch.int8),
    (TensorProto.INT16, torch.int16),
    (TensorProto.INT32, torch.int32),
    (TensorProto.INT64, torch.int64),
    (TensorProto.UINT8, torch.uint8),
    (TensorProto.UINT16, torch.uint16),
    (TensorProto.UINT32, torch.uint32),
    (TensorProto.UINT64, torch.uint64),
]


@pytest.mark.parametrize(("onnx_type", "torch_type"), ALL_TYPES, ids=lambda t: str(t))
def test_every_numeric_type_round_trips(tmp_path: Path, onnx_type: int, torch_type: torch.dtype) -> None:
    runner = runner_for(graphs.identity(tmp_path / "id.onnx", onnx_type))
    x = torch.tensor([[0, 1], [7, 100]], dtype=torch.int64).to(torch_type)
    y = runner.run({"x": x})["y"]
    assert y.dtype == torch_type
    assert torch.equal(y, x)
    assert y.data_ptr() != x.data_ptr()  # ORT wrote into the output we allocated, not an alias of the input


def test_data_dependent_output_shape(tmp_path: Path) -> None:
    path = graphs.nonzero(tmp_path / "nz.onnx")
    x = torch.tensor([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 0.0, 0.0]])
    got = runner_for(path).run({"x": x})["indices"]
    np.testing.assert_array_equal(got.numpy(), session_run(path, {"x": x.numpy()})["indices"])
    assert got.shape == (2, 3)


def test_outputs_are_not_shared_between_runs() -> None:
    # A previous answer may still be leaving through Triton while the next run starts.
    runner = runner_for(demo_onnx())
    first = runner.run({"np_script_embeddings": torch.ones(2, 2010)})["np_logits"]
    kept = first.clone()
    runner.run({"np_script_embeddings": torch.zeros(2, 2010)})
    assert torch.equal(first, kept)


def test_empty_batch_gives_empty_outputs() -> None:
    got = runner_for(demo_onnx()).run({"np_script_embeddings": torch.empty(0, 2010)})
    assert got["np_logits"].shape == (0, 2)


def test_non_contiguous_input_is_bound_correctly() -> None:
    runner = runner_for(demo_onnx())
    wide = torch.randn(2010, 6)
    strided = wide.t()  # [6, 2010], not contiguous
    assert not strided.is_contiguous()
    got = runner.run({"np_script_embeddings": strided})["np_logits"]
    want = runner.run({"np_script_embeddings": strided.contiguous()})["np_logits"]
    assert torch.equal(got, want)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            {"np_script_embeddings": torch.zeros(2, 2010, dtype=torch.float64)},
            "input 'np_script_embeddings': expected FP32 (torch.float32), got torch.float64",
        ),
        (
            {"np_script_embeddings": torch.zeros(2, 2000)},
            "input 'np_script_embeddings': expected shape [batch, 2010], got [2, 2000]",
        ),
        (
            {"np_script_embeddings": torch.zeros(2010)},
            "input 'np_script_embeddings': expected shape [batch, 2010], got [2010]",
        ),
        ({}, "missing input(s) ['np_script_embeddings']; the model's inputs are ['np_script_embeddings']"),
        (
            {"np_script_embeddings": torch.zeros(1, 2010), "extra": torch.zeros(1)},
            "unknown input(s) ['extra']; the model's inputs are ['np_script_embeddings']",
        ),
        (
            {"extra": torch.zeros(1)},
            "unknown input(s) ['extra'], missing input(s) ['np_script_embeddings']; the model's inputs are "
            "['np_script_embeddings']",
        ),
    ],
)
def test_input_errors_name_what_was_expected_and_what_came(
    inputs: dict[str, torch.Tensor], message: str
) -> None:
    with pytest.raises(InputError) as caught:
        runner_for(demo_onnx()).run(inputs)
    assert message in str(caught.value)


def test_inputs_are_bound_every_run_and_new_values_are_used() -> None:
    """ORT may copy an input at bind time (one it needs on another device), so an input is bound again
    even at an unchanged address; fresh values at the same address must give fresh answers."""
    runner = runner_for(demo_onnx())
    x = torch.randn(4, 2010)
    runner.run({"np_script_embeddings": x})
    binds = runner.stats.binds
    runner.run({"np_script_embeddings": x})
    assert 1 <= runner.stats.binds - binds <= 2  # the input, and the output when the allocator moved it
    x.copy_(torch.randn(4, 2010))  # new values, same address
    got = runner.run({"np_script_embeddings": x})["np_logits"]
    want = session_run(demo_onnx(), {"np_script_embeddings": x.numpy()})["np_logits"]
    np.testing.assert_array_equal(got.numpy(), want)
    y = torch.randn(4, 2010)
    got = runner.run({"np_script_embeddings": y})["np_logits"]
    want = session_run(demo_onnx(), {"np_script_embeddings": y.numpy()})["np_logits"]
    np.testing.assert_array_equal(got.numpy(), want)


def test_output_placement_leaves_a_cpu_session_unchanged() -> None:
    session = ort.InferenceSession(str(demo_onnx()), providers=["CPUExecutionProvider"])
    runner = IOBindingRunner(session, CPU, output_placement=OutputPlacement("host"))
    out = runner.run({"np_script_embeddings": torch.randn(3, 2010)})["np_logits"]
    assert out.device.type == "cpu" and not out.is_pinned()
    assert (runner.stats.device_to_host_copies, runner.stats.host_output_runs) == (0, 0)


def demo_run(runner: IOBindingRunner, x: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = runner.run({"np_script_embeddings": x})["np_logits"]  # a runner on torch
    return out


def demo_reference(x: torch.Tensor) -> NDArray[Any]:
    return session_run(demo_onnx(), {"np_script_embeddings": x.numpy()})["np_logits"]


def test_cached_plans_answer_as_fresh_runs_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """Served the way ModelInstance serves (reclaim_outputs before each execute): a new shape, the same
    shape again from its plan, a shape back after its plan was evicted, and a repeat of a shape within
    one execute all answer as session.run does, and no answer is overwritten by a later run."""
    monkeypatch.setattr(run_plan_cache_module, "PLAN_CACHE_SIZE", 2)
    runner = runner_for(demo_onnx())
    for rows in (3, 3, 5, 7, 9, 3):  # 3 is planned, reused, evicted by 5/7/9, and planned again
        runner.reclaim_outputs()
        x = torch.randn(rows, 2010)
        np.testing.assert_array_equal(demo_run(runner, x).numpy(), demo_reference(x))
        assert runner.plans.count <= 2
    runner.reclaim_outputs()
    first_x, second_x = torch.randn(4, 2010), torch.randn(4, 2010)
    first = demo_run(runner, first_x)  # the plan's buffers
    second = demo_run(runner, second_x)  # same signature, same execute: a spare plan
    assert first.data_ptr() != second.data_ptr()
    np.testing.assert_array_equal(first.numpy(), demo_reference(first_x))
    np.testing.assert_array_equal(second.numpy(), demo_reference(second_x))


def test_steady_state_binds_only_the_inputs() -> None:
    """A plan binds its outputs once: a repeated signature rebinds only its input, and writes into the
    same output buffer (no allocation per run)."""
    runner = runner_for(demo_onnx())
    x = torch.randn(6, 2010)
    runner.reclaim_outputs()
    pointer = demo_run(runner, x).data_ptr()
    binds = runner.stats.binds
    for _ in range(3):
        runner.reclaim_outputs()
        assert demo_run(runner, x).data_ptr() == pointer
    assert runner.stats.binds - binds == 3


def test_a_failed_run_drops_its_plan_and_the_next_run_is_right(tmp_path: Path) -> None:
    path = graphs.gather_elements(tmp_path / "g.onnx")
    runner = runner_for(path)
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    good, bad = torch.tensor([[1], [3]]), torch.tensor([[1], [9]])
    runner.reclaim_outputs()
    runner.run({"x": x, "idx": good})
    assert runner.plans.count == 1
    runner.reclaim_outputs()
    with pytest.raises(Exception, match="GatherElements"):
        runner.run({"x": x, "idx": bad})
    assert runner.plans.count == 0
    runner.reclaim_outputs()
    got = runner.run({"x": x, "idx": good})["out"]
    want = session_run(path, {"x": x.numpy(), "idx": good.numpy()})["out"]
    np.testing.assert_array_equal(got.numpy(), want)


def test_plans_keep_data_dependent_outputs_right_across_shapes(tmp_path: Path) -> None:
    path = graphs.nonzero(tmp_path / "nz.onnx")
    runner = runner_for(path)
    for x in (torch.tensor([[0.0, 1.0, 0.0, 0.0]]), torch.tensor([[0.0, 1.0, 2.0, 3.0]])):
        runner.reclaim_outputs()  # one signature, answers of different sizes
        got = runner.run({"x": x})["indices"]
        np.testing.assert_array_equal(got.numpy(), session_run(path, {"x": x.numpy()})["indices"])


def test_an_empty_ort_allocated_output_has_strides_the_python_backend_accepts(tmp_path: Path) -> None:
    """NonZero finding nothing: ORT hands back [2, 0] with strides (0, 0) through DLPack, which
    pb_utils.Tensor.from_dlpack refused ('DLPack tensor is not contiguous')."""
    path = graphs.nonzero(tmp_path / "nz.onnx")
    runner = runner_for(path)
    for execute in range(2):  # a plan's first run and its cached one
        runner.reclaim_outputs()
        got = runner.run({"x": torch.zeros(3, 4)})["indices"]
        assert got.shape == session_run(path, {"x": np.zeros((3, 4), np.float32)})["indices"].shape == (2, 0)
        assert got.dtype == torch.int64
        assert python_backend_accepts(got), (execute, got.stride())
        capsule = torch.utils.dlpack.to_dlpack(got)  # type: ignore[attr-defined]  # as the adapter hands it on
        dlpack_view = torch.utils.dlpack.from_dlpack(capsule)
        assert python_backend_accepts(dlpack_view)
    found = runner.run({"x": torch.ones(1, 4)})["indices"]  # and a non-empty answer is still the data
    np.testing.assert_array_equal(found.numpy(), [[0, 0, 0, 0], [0, 1, 2, 3]])


def test_an_empty_preallocated_output_has_strides_the_python_backend_accepts(tmp_path: Path) -> None:
    path = graphs.pairwise_add(tmp_path / "add.onnx")  # z[batch, n]: allocated by the plan
    runner = runner_for(path)
    runner.reclaim_outputs()
    for rows, width in ((3, 0), (0, 5), (0, 0)):
        got = runner.run({"x": torch.ones(rows, width), "y": torch.ones(rows, width)})["z"]
        assert got.shape == (rows, width) and python_backend_accepts(got), got.stride()


def test_onnx_runtimes_python_api_takes_strings_only_through_run_and_only_as_str(tmp_path: Path) -> None:
    """What a BYTES path has to work with: IO binding and OrtValue refuse string data,
    so strings reach ORT only through session.run (beside OrtValues over the numeric tensors' memory), and
    there a bytes object is fed as its repr: BYTES must be decoded to str first."""
    path = graphs.strings_beside_numbers(tmp_path / "s.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    strings = np.array([b"ab", "\u00e9".encode()], dtype=object)
    with pytest.raises(RuntimeError, match="non-string"):
        session.io_binding().bind_cpu_input("s", strings)
    with pytest.raises(RuntimeError, match="non-string"):
        ort.OrtValue.ortvalue_from_numpy(strings)
    x = torch.ones(2, 2)
    numbers = ort.OrtValue.from_dlpack(x.__dlpack__())  # zero-copy over torch's memory
    as_bytes = session.run(None, {"s": strings, "x": numbers})
    assert list(as_bytes[0]) == ["b'ab'", "b'\\xc3\\xa9'"]  # the repr, not the text
    decoded = session.run(None, {"s": np.array([s.decode() for s in strings], dtype=object), "x": numbers})
    assert list(decoded[0]) == ["ab", "\u00e9"]
    np.testing.assert_array_equal(decoded[1], 2 * x.numpy())


def test_strings_go_through_the_host_beside_numbers_bound_zero_copy(tmp_path: Path) -> None:
    path = graphs.strings_beside_numbers(tmp_path / "s.onnx")
    runner = runner_for(path)
    # as pb_utils.as_numpy gives them; two of one length (a fixed-width array ran one into the next)
    strings = np.array([b"equal width", b"EQUAL WIDTH", b"short", b"", "çà".encode()], dtype=object)
    x = torch.randn(5, 2)
    got = runner.run({"s": strings, "x": x})
    want = session_run(path, {"s": np.array([s.decode() for s in strings], dtype=object), "x": x.numpy()})
    assert list(got["t"]) == list(want["t"])
    np.testing.assert_array_equal(got["y"].numpy(), want["y"])


def test_every_run_names_its_cuda_graph_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """ORT >= 1.31 looks up gpu_graph_id in a run's options at every run_with_iobinding; a missing key
    costs an exception inside ORT (30-100 µs), so every RunOptions the runner passes names it."""
    passed: list[ort.RunOptions | None] = []
    real = ort.InferenceSession.run_with_iobinding

    def spy(self: ort.InferenceSession, binding: Any, run_options: ort.RunOptions | None = None) -> None:
        passed.append(run_options)
        real(self, binding, run_options)

    monkeypatch.setattr(ort.InferenceSession, "run_with_iobinding", spy)
    session = ort.InferenceSession(str(demo_onnx()), providers=["CPUExecutionProvider"])
    for runner in (IOBindingRunner(session, CPU), IOBindingRunner(session, CPU, arena_shrinkage="cpu:0")):
        for _ in range(2):
            runner.reclaim_outputs()
            runner.run({"np_script_embeddings": torch.randn(3, 2010)})
    assert passed[:2] == [None, None]  # no options at all: ORT does not look
    assert len(passed) == 4 and all(o is not None for o in passed[2:])
    assert {o.get_run_config_entry("gpu_graph_id") for o in passed[2:] if o is not None} == {"-1"}


def test_an_output_ort_sizes_otherwise_than_its_axis_name_falls_back_to_ort_allocation(
    tmp_path: Path,
) -> None:
    """A decoder's present.* is named like the attention mask's axis; with a mask longer than past +
    sequence ORT computes another size. The run answers as session.run does (ORT allocates that output),
    and the signature's next run goes straight to the plan that leaves it to ORT."""
    path = graphs.decoder_step(tmp_path / "decoder.onnx")
    runner = runner_for(path)
    fits = {
        "x": torch.rand(2, 1),
        "past": torch.rand(2, 3),
        "attention_mask": torch.ones(2, 4, dtype=torch.int64),
    }
    longer = {**fits, "attention_mask": torch.ones(2, 6, dtype=torch.int64)}
    for tensors in (fits, longer, longer, fits):
        runner.reclaim_outputs()
        got = runner.run(tensors)
        want = session_run(path, {name: t.numpy() for name, t in tensors.items()})
        assert list(got) == ["present", "logits"]
        for name, value in want.items():
            np.testing.assert_array_equal(got[name].numpy(), value)
    assert runner.stats.ort_runs == 4  # the failed run is not counted, and failed once only
    assert runner.plans.count == 2
    assert runner.plans.ort_sized == {signature_of(longer): frozenset({"present"})}


def test_a_run_failing_otherwise_is_not_run_again(tmp_path: Path) -> None:
    runner = runner_for(graphs.pairwise_add(tmp_path / "pair.onnx"))
    runner.reclaim_outputs()
    with pytest.raises(Exception, match="Add"):
        runner.run({"x": torch.ones(1, 2), "y": torch.ones(1, 3)})
    assert runner.stats.ort_runs == 0 and not runner.plans.ort_sized


def test_the_older_ort_wordings_leave_every_planned_output_to_ort() -> None:
    older = RuntimeError("Shape mismatch attempting to re-use buffer. {2,6} != {2,4}. Validate usage")
    assert mismatched_outputs(older, ["present", "logits"]) == {"present", "logits"}
    verified = RuntimeError("OrtValue shape verification failed. Current shape:{2,6} Requested shape:{2,4}")
    assert mismatched_outputs(verified, ["present"]) == {"present"}
    newer = RuntimeError(
        "The output OrtValue provided for output 'present' of node '' (Concat) has shape {2,6} but the "
        "computed output shape for this run is {2,4}."
    )
    assert mismatched_outputs(newer, ["present", "logits"]) == {"present"}
    assert mismatched_outputs(RuntimeError("out of memory"), ["present"]) == set()
