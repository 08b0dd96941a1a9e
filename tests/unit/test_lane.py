"""A lane without Triton (lane.Lane: a runner, what gathering calls around it, and its stream), and
gathering's rules (gather.run_requests) with a fake runner that records every run, so that what is
grouped, split and isolated shows without ORT in the way."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import onnxruntime as ort
import pytest
import torch

from tests.support.paths import demo_instance_config, demo_onnx
from triton_ort.errors import InferenceError, InputError
from triton_ort.model.load_checks import checked_options
from triton_ort.model.served_config import ServedConfig
from triton_ort.runtime.gather import run_requests
from triton_ort.runtime.lane import Lane
from triton_ort.runtime.model_plan import ModelPlan
from triton_ort.runtime.runner import IOBindingRunner
from triton_ort.runtime.session import Placement

INPUT, OUTPUT = "np_script_embeddings", "np_logits"


def _runner() -> IOBindingRunner:
    session = ort.InferenceSession(str(demo_onnx()), providers=["CPUExecutionProvider"])
    return IOBindingRunner(session, Placement("cpu"))


def _lane(plan: ModelPlan) -> Lane:
    """A lane of its own over a session of its own, as the plan decided it (Lane.build)."""
    session = ort.InferenceSession(str(demo_onnx()), providers=["CPUExecutionProvider"])
    return Lane.build(plan, session, Placement("cpu"), stream=None)


@pytest.fixture(scope="module")
def plan() -> ModelPlan:
    config = ServedConfig.parse(demo_instance_config(64))
    return ModelPlan.build(
        config, checked_options(config), None, demo_onnx(), _runner().signature, graphs=False
    )


def test_a_lane_answers_an_execute_in_request_order_with_one_gathered_run(plan: ModelPlan) -> None:
    lane = _lane(plan)
    requests = [{INPUT: torch.randn(rows, 2010)} for rows in (2, 1, 3)]
    wanted = [_runner().run(request)[OUTPUT].clone() for request in requests]
    runs = lane.runner.stats.ort_runs
    results = lane.wait(lane.queue(requests))
    assert lane.runner.stats.ort_runs - runs == 1
    for result, want in zip(results, wanted, strict=True):
        assert isinstance(result, dict)
        torch.testing.assert_close(result[OUTPUT], want, rtol=1e-5, atol=1e-6)


def test_two_lanes_on_one_plan_answer_apart(plan: ModelPlan) -> None:
    """What a scheduler with a lane per worker would do: each lane's answers are its own, and an execute
    on one leaves the other's outputs as they were (no buffer shared through the plan)."""
    first, second = _lane(plan), _lane(plan)
    one, two = torch.randn(4, 2010), torch.randn(4, 2010)
    from_first = first.wait(first.queue([{INPUT: one}]))[0]
    assert isinstance(from_first, dict)
    kept = from_first[OUTPUT].clone()
    from_second = second.wait(second.queue([{INPUT: two}]))[0]
    assert isinstance(from_second, dict)
    torch.testing.assert_close(from_first[OUTPUT], kept)  # the second lane wrote nothing of the first's
    torch.testing.assert_close(from_second[OUTPUT], _runner().run({INPUT: two})[OUTPUT])
    assert first.runner is not second.runner and first.plan is second.plan


def test_the_runner_takes_the_plans_decisions_about_the_sessions_tensors(plan: ModelPlan) -> None:
    """The plan decides once which inputs hold one value per run and whether outputs follow the batch
    axis; a lane's runner takes them from it and does not decide them again (a plan changed here shows)."""
    assert plan.shared_inputs == frozenset() and plan.runner_outputs_follow_batch is True
    decided = dataclasses.replace(
        plan, shared_inputs=frozenset({"decided"}), runner_outputs_follow_batch=False
    )
    runner = _lane(decided).runner
    assert runner.shared_inputs == frozenset({"decided"}) and runner.outputs_follow_batch is False
    assert plan.served_outputs({"extra": 1, OUTPUT: 2}) == {OUTPUT: 2}  # config.pbtxt's, in its order


def test_a_lane_refuses_a_bad_request_alone(plan: ModelPlan) -> None:
    lane = _lane(plan)
    good, bad = {INPUT: torch.randn(2, 2010)}, {INPUT: torch.randn(2, 7)}
    results = lane.wait(lane.queue([good, bad, good]))
    assert isinstance(results[1], InputError) and "2010" in str(results[1])
    assert all(isinstance(results[i], dict) for i in (0, 2))


class FakeRunner:
    """A BatchRunner whose answer is each row's value times two: it records the rows of every run, and
    fails any run that holds a row of value `poison` (as a kernel fails on a request's values)."""

    outputs_follow_batch = True
    placement = Placement("cpu")

    def __init__(self, shared_inputs: frozenset[str] = frozenset(), poison: float = -1.0) -> None:
        self.shared_inputs = shared_inputs
        self.poison = poison
        self.runs: list[list[int]] = []

    def check(self, tensors: Mapping[str, torch.Tensor]) -> None:
        if "x" not in tensors:
            raise InputError("no input 'x'")

    def run_batch(self, requests: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        x = torch.cat([tensors["x"] for tensors in requests])
        self.runs.append([t["x"].shape[0] for t in requests])
        if bool((x == self.poison).any()):
            raise RuntimeError("Non-zero status code returned while running Gather node")
        return {"y": x * 2}


def test_gathering_groups_what_agrees_and_splits_the_answers_back() -> None:
    runner = FakeRunner()
    requests = [{"x": torch.full((rows, 3), float(i))} for i, rows in enumerate((1, 2, 3))]
    requests.append({"x": torch.full((2, 5), 9.0)})  # other inner dims: a group of its own
    results = run_requests(runner, requests, gather=True)
    assert sorted(runner.runs) == [[1, 2, 3], [2]]
    for request, result in zip(requests, results, strict=True):
        assert isinstance(result, dict)
        torch.testing.assert_close(result["y"], request["x"] * 2)


def test_a_joint_run_that_fails_runs_each_alone_and_only_the_culprit_fails() -> None:
    runner = FakeRunner(poison=-1.0)
    requests = [{"x": torch.ones(2, 3)}, {"x": torch.full((1, 3), -1.0)}, {"x": torch.ones(1, 3)}]
    results = run_requests(runner, requests, gather=True)
    assert runner.runs == [[2, 1, 1], [2], [1], [1]]
    assert isinstance(results[1], InputError) and "could not compute" in str(results[1])
    assert isinstance(results[0], dict) and isinstance(results[2], dict)


def test_requests_gather_with_a_shared_input_only_where_its_value_is_the_same() -> None:
    runner = FakeRunner(shared_inputs=frozenset({"scale"}))
    a, b = torch.tensor([1.0]), torch.tensor([2.0])
    requests = [{"x": torch.ones(1, 3), "scale": s} for s in (a, b, a.clone())]
    run_requests(runner, requests, gather=True)
    assert sorted(runner.runs) == [[1], [1, 1]]


def test_a_request_the_runner_refuses_is_answered_alone_and_gathering_off_runs_each() -> None:
    runner = FakeRunner()
    results = run_requests(runner, [{"x": torch.ones(1, 3)}, {"z": torch.ones(1, 3)}], gather=False)
    assert isinstance(results[1], InputError) and runner.runs == [[1]]
    results = run_requests(runner, [{"x": torch.ones(1, 3)}] * 3, gather=False)
    assert runner.runs[1:] == [[1], [1], [1]] and not any(isinstance(r, InferenceError) for r in results)
