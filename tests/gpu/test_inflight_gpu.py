"""Requests in flight on a GPU instance (runtime/inflight.py): each lane its own session on its own CUDA
stream, CUDA inputs answered as the classic execute answers them, and CUDA graphs refused with the mode."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import torch

from tests.support.paths import DEMO_MAX_BATCH, TF32_TOLERANCE, demo_instance_config, demo_onnx
from triton_ort import ConfigError, ModelInstance
from triton_ort.runtime.gather import Result
from triton_ort.runtime.inflight import InflightScheduler, Pending

pytestmark = pytest.mark.gpu


def test_lanes_have_their_own_streams_and_answer_as_the_classic_execute() -> None:
    config = demo_instance_config(DEMO_MAX_BATCH, inflight_lanes="2")
    instance = ModelInstance(config, demo_onnx().parent, "GPU", 0)
    streams = [lane.stream for lane in instance.lanes]
    assert len(streams) == 2 and all(streams) and streams[0] != streams[1]
    assert instance.lanes[0].runner.session is not instance.lanes[1].runner.session
    generator = torch.Generator(device="cuda").manual_seed(0)
    requests = [
        {"np_script_embeddings": torch.randn(n, 2010, device="cuda", generator=generator)}
        for n in (1, 5, 3, 8)
    ]
    expected = []
    for request in requests:
        result = instance.infer([request])[0]
        assert isinstance(result, dict), result
        expected.append({k: v.clone() for k, v in result.items()})  # the lane's buffers are reused
    scheduler = InflightScheduler(instance.infer, len(instance.lanes), instance.plan.max_batch_size)
    answers: dict[int, Result] = {}
    done = threading.Event()

    def answer(index: int) -> Callable[[Result], None]:
        def send(result: Result) -> None:
            answers[index] = (
                result if isinstance(result, Exception) else {k: v.clone() for k, v in result.items()}
            )
            if len(answers) == len(requests):
                done.set()

        return send

    for index, request in enumerate(requests):
        scheduler.submit(Pending(request, answer(index), rows=len(request["np_script_embeddings"])))
    assert done.wait(30), answers
    scheduler.close()
    instance.close()
    for index, want in enumerate(expected):
        got = answers[index]
        assert isinstance(got, dict), got
        torch.testing.assert_close(got["np_logits"], want["np_logits"], **TF32_TOLERANCE)


def test_cuda_graphs_are_refused_with_lanes_in_flight() -> None:
    config = demo_instance_config(DEMO_MAX_BATCH, inflight_lanes="2", cuda_graph="true")
    with pytest.raises(ConfigError, match="inflight_lanes 2 cannot be combined with CUDA graphs"):
        ModelInstance(config, demo_onnx().parent, "GPU", 0)


def test_the_lanes_sessions_share_one_copy_of_the_weights_on_the_device() -> None:
    """A change to the shared last-layer bias moves every lane's answers: their sessions use that buffer.
    It failed at load on main bb700fe (ORT refused device weights that it had allocated itself)."""
    instance = ModelInstance(
        demo_instance_config(DEMO_MAX_BATCH, inflight_lanes="2"), demo_onnx().parent, "GPU", 0
    )
    shared = instance._shared_weights
    assert shared is not None and shared["2.bias"].device_name() == "cuda"
    x = {"np_script_embeddings": torch.randn(4, 2010, device="cuda")}
    before = []
    for lane in (0, 1):
        result = instance.infer([x], lane)[0]
        assert isinstance(result, dict), result
        before.append(result["np_logits"].clone())  # the lane's buffers are reused
    shared["2.bias"].update_inplace(shared["2.bias"].numpy() + 1.0)
    for lane in (0, 1):
        after = instance.infer([x], lane)[0]
        assert isinstance(after, dict), after
        torch.testing.assert_close(after["np_logits"], before[lane] + 1.0, **TF32_TOLERANCE)
