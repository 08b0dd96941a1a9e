"""Request gathering: one ORT run for compatible requests, correct splits, bad requests isolated."""

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tests.support import graphs
from tests.support.paths import demo_onnx
from triton_ort import InputError, IOBindingRunner, ModelInstance, Placement, run_requests


def runner_for(path: Path) -> IOBindingRunner:
    return IOBindingRunner(
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), Placement("cpu")
    )


def alone(runner: IOBindingRunner, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return runner.run(tensors)


def test_compatible_requests_share_one_run_and_split_back() -> None:
    runner = runner_for(demo_onnx())
    requests = [{"np_script_embeddings": torch.randn(rows, 2010)} for rows in (1, 3, 2, 5)]
    expected = [alone(runner, r)["np_logits"] for r in requests]
    runs_before = runner.stats.ort_runs
    results = run_requests(runner, requests, gather=True)
    assert runner.stats.ort_runs - runs_before == 1
    for result, want in zip(results, expected, strict=True):
        assert isinstance(result, dict)
        torch.testing.assert_close(result["np_logits"], want, rtol=1e-5, atol=1e-6)


def test_a_gathered_batch_is_concatenated_into_the_memory_the_runner_offers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the runner has fixed memory for a run's inputs (a CUDA graph's input buffers, tests/gpu), the
    concatenation is written there and the joint run reads it: one copy of the batch, not two."""
    runner = runner_for(demo_onnx())
    requests = [{"np_script_embeddings": torch.randn(rows, 2010)} for rows in (1, 3, 2)]
    expected = [alone(runner, r)["np_logits"] for r in requests]
    offered = torch.full((8, 2010), float("nan"))
    asked: list[tuple[dict[str, torch.Size], int]] = []
    read: list[int] = []

    def input_buffers(tensors: dict[str, torch.Tensor], rows: int) -> dict[str, torch.Tensor]:
        asked.append(({name: tensor.shape for name, tensor in tensors.items()}, rows))
        return {"np_script_embeddings": offered[:6]}

    run_checked = runner.run_checked

    def recorded_run(tensors: dict[str, torch.Tensor], queued: bool) -> Any:
        read.append(tensors["np_script_embeddings"].data_ptr())
        return run_checked(tensors, queued)

    monkeypatch.setattr(runner.plans, "input_buffers", input_buffers)
    monkeypatch.setattr(runner, "run_checked", recorded_run)
    results = run_requests(runner, requests, gather=True)
    # asked by the first request's tensors (dtypes, inner axes) and the joint run's rows: no tensor made
    assert asked == [({"np_script_embeddings": torch.Size((1, 2010))}, 6)]
    assert read == [offered.data_ptr()]
    torch.testing.assert_close(offered[:6], torch.cat([r["np_script_embeddings"] for r in requests]))
    assert offered[6:].isnan().all()  # only the run's own rows written
    for result, want in zip(results, expected, strict=True):
        assert isinstance(result, dict)
        torch.testing.assert_close(result["np_logits"], want, rtol=1e-5, atol=1e-6)


def test_gathering_off_runs_each_request() -> None:
    runner = runner_for(demo_onnx())
    requests = [{"np_script_embeddings": torch.randn(2, 2010)} for _ in range(3)]
    run_requests(runner, requests, gather=False)
    assert runner.stats.ort_runs == 3


def test_bad_request_fails_alone_and_neighbours_get_their_answers() -> None:
    runner = runner_for(demo_onnx())
    good = [{"np_script_embeddings": torch.randn(2, 2010)} for _ in range(3)]
    bad = {"np_script_embeddings": torch.randn(2, 7)}
    expected = [alone(runner, r)["np_logits"] for r in good]
    results = run_requests(runner, [good[0], bad, good[1], good[2]], gather=True)
    assert isinstance(results[1], InputError)
    assert "expected shape [batch, 2010], got [2, 7]" in str(results[1])
    for result, want in zip([results[0], results[2], results[3]], expected, strict=True):
        assert isinstance(result, dict)
        torch.testing.assert_close(result["np_logits"], want, rtol=1e-5, atol=1e-6)


def test_requests_of_different_shapes_run_in_their_own_groups(tmp_path: Path) -> None:
    runner = runner_for(graphs.pairwise_add(tmp_path / "add.onnx"))
    narrow = [{"x": torch.ones(1, 2) * i, "y": torch.ones(1, 2)} for i in range(3)]
    wide = [{"x": torch.ones(2, 5) * i, "y": torch.ones(2, 5)} for i in range(2)]
    runs_before = runner.stats.ort_runs
    results = run_requests(runner, [narrow[0], wide[0], narrow[1], wide[1], narrow[2]], gather=True)
    assert runner.stats.ort_runs - runs_before == 2
    for result, request in zip(results, [narrow[0], wide[0], narrow[1], wide[1], narrow[2]], strict=True):
        assert isinstance(result, dict)
        assert torch.equal(result["z"], request["x"] + request["y"])


def test_runtime_failure_of_one_request_does_not_fail_the_group(tmp_path: Path) -> None:
    runner = runner_for(graphs.pairwise_add(tmp_path / "add.onnx"))
    good = {"x": torch.ones(1, 3), "y": torch.ones(1, 3)}
    unaddable = {"x": torch.ones(1, 3), "y": torch.ones(1, 4)}  # passes validation, fails inside ORT
    results = run_requests(runner, [good, unaddable, good], gather=True)
    assert isinstance(results[1], InputError)
    assert "could not compute this request's values" in str(results[1])
    for result in (results[0], results[2]):
        assert isinstance(result, dict)
        assert torch.equal(result["z"], torch.full((1, 3), 2.0))


def test_outputs_without_a_batch_axis_fall_back_to_single_runs(tmp_path: Path) -> None:
    runner = runner_for(graphs.nonzero(tmp_path / "nz.onnx"))
    requests = [{"x": torch.tensor([[1.0, 0.0, 0.0, 0.0]])}, {"x": torch.tensor([[0.0, 2.0, 3.0, 0.0]])}]
    results = run_requests(runner, requests, gather=True)
    assert isinstance(results[0], dict) and isinstance(results[1], dict)
    assert results[0]["indices"].tolist() == [[0], [0]]
    assert results[1]["indices"].tolist() == [[0, 0], [1, 2]]


def test_request_whose_inputs_disagree_on_batch_is_refused_alone(tmp_path: Path) -> None:
    # x[1,3] + y[2,3] would broadcast inside ORT although the model names both first axes 'batch'.
    runner = runner_for(graphs.pairwise_add(tmp_path / "add.onnx"))
    odd = {"x": torch.ones(1, 3), "y": torch.arange(6.0).reshape(2, 3)}
    normal = {"x": torch.ones(2, 3), "y": torch.ones(2, 3)}
    results = run_requests(runner, [normal, odd, normal], gather=True)
    assert isinstance(results[1], InputError)
    assert "inputs 'x' and 'y' must agree on axis 'batch': got 1 and 2" in str(results[1])
    for result in (results[0], results[2]):
        assert isinstance(result, dict) and torch.equal(result["z"], torch.full((2, 3), 2.0))


def ort_answer(path: Path, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """In-process ONNX Runtime's y for the same feeds (an overridable input left out takes its default)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.from_numpy(session.run(["y"], {name: t.numpy() for name, t in tensors.items()})[0])


def test_requests_gather_only_with_those_that_send_the_same_overridable_inputs_and_values(
    tmp_path: Path,
) -> None:
    """No request's answer uses a value it did not send: requests that leave `scale` out run with the
    default, those that send it share a run only with requests of the same value, and `offset` (batched)
    is concatenated only among requests that all send it."""
    path = graphs.overridable(tmp_path / "model.onnx")
    runner = runner_for(path)
    assert runner.shared_inputs == {"scale"} and [s.name for s in runner.inputs] == ["x"]
    x = [torch.randn(rows, 4) for rows in (1, 2, 3, 1, 2, 1, 2, 3)]
    three, five = torch.tensor([3.0]), torch.tensor([5.0])
    requests = [
        {"x": x[0]},
        {"x": x[1], "scale": three},
        {"x": x[2]},
        {"x": x[3], "scale": five},
        {"x": x[4], "scale": three.clone()},  # equal value, another tensor: same run
        {"x": x[5], "offset": torch.ones(1, 4)},
        {"x": x[6], "offset": torch.full((2, 4), -1.0), "scale": five.clone()},
        {"x": x[7], "offset": torch.randn(3, 4)},  # concatenated with the other {x, offset}
    ]
    runs_before = runner.stats.ort_runs
    results = run_requests(runner, requests, gather=True)
    # runs: {x} x2, {x, scale 3} x2, {x, scale 5}, {x, offset}, {x, offset, scale 5}
    assert runner.stats.ort_runs - runs_before == 5
    for request, result in zip(requests, results, strict=True):
        assert isinstance(result, dict), result
        torch.testing.assert_close(result["y"], ort_answer(path, request), rtol=1e-6, atol=1e-6)
    assert torch.equal(results[0]["y"], x[0] * graphs.SCALE_DEFAULT)  # type: ignore[index]


def test_an_unknown_input_is_refused_naming_the_overridable_ones(tmp_path: Path) -> None:
    runner = runner_for(graphs.overridable(tmp_path / "model.onnx"))
    (result,) = run_requests(runner, [{"x": torch.ones(1, 4), "scal": torch.ones(1)}], gather=True)
    assert isinstance(result, InputError)
    assert (
        "unknown input(s) ['scal']; the model's inputs are ['x'], and it may take ['offset', 'scale']"
        in str(result)
    )


def overridable_instance(path: Path, max_batch_size: int = 8) -> ModelInstance:
    return ModelInstance(
        {
            "max_batch_size": max_batch_size,
            "input": [
                {"name": "x", "data_type": "TYPE_FP32", "dims": [4]},
                {"name": "scale", "data_type": "TYPE_FP32", "dims": [1], "optional": True},
            ],
            "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [4]}],
            "parameters": {"warmup": {"string_value": "false"}},
        },
        path.parent,
        "CPU",
        0,
    )


def test_triton_batch_axis_on_a_one_value_input_holds_the_requests_value(tmp_path: Path) -> None:
    """With max_batch_size > 0 a request sends `scale` as [rows, 1], the same value in each row; the model
    gets that one value. Rows that differ are that request's error alone."""
    path = graphs.overridable(tmp_path / "model.onnx")
    instance = overridable_instance(path)
    x = torch.randn(3, 4)
    results = instance.infer(
        [{"x": x, "scale": torch.full((3, 1), 4.0)}, {"x": x, "scale": torch.tensor([[1.0], [2.0], [1.0]])}]
    )
    assert isinstance(results[0], dict)
    torch.testing.assert_close(results[0]["y"], ort_answer(path, {"x": x, "scale": torch.tensor([4.0])}))
    assert isinstance(results[1], InputError)
    assert "input 'scale' holds one value for the whole request" in str(results[1])


def test_a_graph_that_mixes_rows_runs_its_requests_apart_unless_told_to_gather(tmp_path: Path) -> None:
    path = graphs.quantized_mlp(tmp_path / "model.onnx")
    config: dict[str, Any] = {
        "max_batch_size": 8,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [graphs.MLP_FEATURES]}],
        "output": [{"name": "logits", "data_type": "TYPE_FP32", "dims": [3]}],
    }
    torch.manual_seed(0)
    rows = [torch.randn(1, graphs.MLP_FEATURES) * (1 + 10 * i) for i in range(6)]
    requests = [{"x": row} for row in rows]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    alone = [session.run(None, {"x": row.numpy()})[0] for row in rows]
    for gather, runs in (("auto", len(rows)), ("yes", 1)):
        instance = ModelInstance(
            {**config, "parameters": {"gather_requests": {"string_value": gather}}}, path.parent, "CPU", 0
        )
        assert instance.plan.gathers is (gather == "yes")
        before = instance.runner.stats.ort_runs
        results = instance.infer(requests)
        assert instance.runner.stats.ort_runs - before == runs
        same = [
            isinstance(result, dict) and np.array_equal(result["logits"].numpy(), want)
            for result, want in zip(results, alone, strict=True)
        ]
        # apart, each request's answer is the one it gets alone; gathered, the small rows get the
        # quantization scale of the large ones
        assert all(same) if gather == "auto" else not all(same)


def test_a_scalar_default_takes_the_one_value_triton_sends_as_1(tmp_path: Path) -> None:
    path = graphs.scalar_default(tmp_path / "model.onnx")
    x = torch.randn(2, 2)
    for max_batch_size, scale in ((8, torch.full((2, 1), 3.0)), (0, torch.tensor([3.0]))):
        instance = ModelInstance(
            {
                "max_batch_size": max_batch_size,
                "input": [
                    {"name": "x", "data_type": "TYPE_FP32", "dims": [2] if max_batch_size else [-1, 2]},
                    {"name": "t", "data_type": "TYPE_FP32", "dims": [1], "optional": True},
                ],
                "output": [
                    {"name": "y", "data_type": "TYPE_FP32", "dims": [2] if max_batch_size else [-1, 2]}
                ],
                "parameters": {"warmup": {"string_value": "false"}},
            },
            path.parent,
            "CPU",
            0,
        )
        with_t, without = instance.infer([{"x": x, "t": scale}, {"x": x}])
        assert isinstance(with_t, dict) and isinstance(without, dict)
        assert torch.equal(with_t["y"], x * 3.0) and torch.equal(without["y"], x * 0.5)
