"""Request gathering: one ORT run for compatible requests, correct splits, bad requests isolated."""

from pathlib import Path

import onnxruntime as ort
import torch

from tests import graphs
from tests.paths import demo_onnx
from triton_ort import InputError, IOBindingRunner, Placement, run_requests


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
