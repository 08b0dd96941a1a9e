"""CUDA graphs per bucket of batch sizes (runner.py, "CUDA graphs"): which size a batch is padded to, and
which models ModelInstance lets pad. The padded runs themselves need a GPU: tests/gpu/test_gpu.py."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support import graphs
from tests.support.paths import demo_onnx
from triton_ort import IOBindingRunner, ModelInstance
from triton_ort.runtime.graph_buckets import graph_bucket
from triton_ort.runtime.run_plan import ROW_VIEWS_KEPT, RunPlan


@pytest.mark.parametrize(
    ("rows", "max_rows", "bucket"),
    [
        (0, 1024, 0),
        (1, 1024, 1),
        (2, 1024, 2),
        (3, 1024, 4),
        (100, 1024, 128),
        (128, 1024, 128),
        (600, 1000, 1000),
        (1000, 1000, 1000),
        (1025, 1024, 1025),
    ],
)
def test_a_batch_pads_to_the_next_power_of_two_up_to_max_batch_size(
    rows: int, max_rows: int, bucket: int
) -> None:
    assert graph_bucket(rows, max_rows) == bucket


def _instance(
    path: Path, max_batch_size: int, parameters: dict[str, str], inputs: list[Any], outputs: list[Any]
) -> ModelInstance:
    return ModelInstance(
        {
            "max_batch_size": max_batch_size,
            "input": inputs,
            "output": outputs,
            "parameters": {"warmup": {"string_value": "false"}}
            | {k: {"string_value": v} for k, v in parameters.items()},
        },
        path.parent,
        "CPU",
        0,
    )


def test_graphs_pad_only_gathered_batches_of_a_graph_that_keeps_rows_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on a GPU instance with cuda_graph: the demo (rows apart, Triton batching) pads up to its
    max_batch_size; a graph that mixes rows does not, even where gather_requests: yes gathers it, nor does
    a model Triton does not batch, nor one whose requests are not gathered."""
    asked: list[int] = []

    def pad_graph_batches(self: IOBindingRunner, max_rows: int) -> bool:
        asked.append(max_rows)
        return True

    monkeypatch.setattr("triton_ort.runtime.instance.graphs_on", lambda *args: True)  # as a CUDA session
    monkeypatch.setattr(IOBindingRunner, "pad_graph_batches", pad_graph_batches)
    demo_in = [{"name": "np_script_embeddings", "data_type": "TYPE_FP32", "dims": [2010]}]
    demo_out = [{"name": "np_logits", "data_type": "TYPE_FP32", "dims": [2]}]
    assert _instance(demo_onnx(), 1024, {}, demo_in, demo_out).plan.graph_rows == 1024
    assert asked == [1024]
    assert not _instance(demo_onnx(), 1024, {"gather_requests": "no"}, demo_in, demo_out).plan.graph_rows
    unbatched_in = [{**demo_in[0], "dims": [-1, 2010]}]
    unbatched_out = [{**demo_out[0], "dims": [-1, 2]}]
    assert not _instance(demo_onnx(), 0, {}, unbatched_in, unbatched_out).plan.graph_rows
    quantized = graphs.quantized_mlp(tmp_path / "model.onnx")
    mlp_in = [{"name": "x", "data_type": "TYPE_FP32", "dims": [graphs.MLP_FEATURES]}]
    mlp_out = [{"name": "logits", "data_type": "TYPE_FP32", "dims": [3]}]
    for gather in ("auto", "yes"):
        assert not _instance(quantized, 8, {"gather_requests": gather}, mlp_in, mlp_out).plan.graph_rows
    assert asked == [1024]


def test_a_padded_plans_row_views_are_made_once_per_row_count_and_bounded() -> None:
    """RunPlan.rows_of: the first rows of a plan's graph inputs (batched ones only), outputs and pinned host
    buffers, the same views each time a row count comes back; at most ROW_VIEWS_KEPT counts kept."""
    x = torch.zeros(8, 3)
    plan = RunPlan(
        binding=None,  # rows_of reads only the buffers
        outputs={"y": torch.zeros(8, 2)},
        ort_allocated=(),
        host={"y": torch.zeros(8, 2)},
        run_options=None,
        graph_inputs={"x": x, "scale": torch.zeros(())},
    )
    views = plan.rows_of(5, frozenset({"scale"}))
    assert set(views.inputs) == {"x"}  # a shared input has no rows to take
    assert views.inputs["x"].shape == (5, 3) and views.inputs["x"].data_ptr() == x.data_ptr()
    assert views.outputs["y"].shape == views.host["y"].shape == (5, 2)
    assert plan.rows_of(5, frozenset({"scale"})) is views
    for rows in range(1, ROW_VIEWS_KEPT + 2):
        plan.rows_of(rows, frozenset({"scale"}))
    assert len(plan._rows_views) <= ROW_VIEWS_KEPT
    # the cache is the plan's own state: no constructor parameter, not in the plan's repr
    assert "_rows_views" not in inspect.signature(RunPlan).parameters
    assert "_rows_views" not in repr(plan)
