"""The benchmark's pipelines (client/pipelines.py): the pre- and post-processing written in torch
(hooks.py: the hooked model, the ensemble's steps, the BLS model) and in numpy (numpy_post.py: the naive
model and the reference) give the same answers, NMS keeps and drops the boxes it should, the checks catch a
wrong answer, and a workload of several requests (classify_images' image sizes) is cycled through and
checked request by request."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from client.bench_common import check_answer, sync_load
from client.load import Workload
from client.pipelines import IMAGE_SIDES, PIPELINES, Arrays, Pipeline, export, write_repository


@pytest.fixture(scope="module")
def onnx_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pipelines")
    files = {}
    for name, pipeline in PIPELINES.items():
        files[name] = folder / f"{name}.onnx"
        export(pipeline, files[name])
    return files


def raw_outputs(pipeline: Pipeline, onnx_path: Path, inputs: Arrays) -> Arrays:
    from onnxruntime import InferenceSession

    session = InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    outputs = session.run(list(pipeline.onnx_outputs), inputs)
    return dict(zip(pipeline.onnx_outputs, outputs, strict=True))


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_torch_and_numpy_post_processing_agree(name: str, onnx_files: dict[str, Path]) -> None:
    pipeline = PIPELINES[name]
    inputs = pipeline.make_inputs(6, np.random.default_rng(1))
    model_inputs = pipeline.numpy_post().preprocess(inputs) if pipeline.preprocesses else inputs
    raw = raw_outputs(pipeline, onnx_files[name], model_inputs)
    in_numpy = pipeline.numpy_post().postprocess(raw, inputs)
    to_torch = {k: torch.from_numpy(v) for k, v in raw.items()}
    in_torch = pipeline.hooks().postprocess(to_torch, {k: torch.from_numpy(v) for k, v in inputs.items()})
    assert set(in_torch) == set(in_numpy) == set(pipeline.hooks().OUTPUTS)
    for output, expected in in_numpy.items():
        got = in_torch[output].numpy()
        assert got.dtype == expected.dtype and got.shape == expected.shape, output
    answer = {k: v.numpy() for k, v in in_torch.items()}
    assert pipeline.agree(answer, in_numpy) == []
    # and the check is not blind: an answer with every value moved by one disagrees
    assert pipeline.agree({k: v + 1 for k, v in answer.items()}, in_numpy) != []


def test_embeddings_pool_only_the_real_tokens() -> None:
    hooks = PIPELINES["embeddings"].hooks()
    states = torch.zeros(1, 64, 256)
    states[0, :2, 0] = 1.0  # the two real tokens point along axis 0
    states[0, 2:, 1] = 100.0  # padding points elsewhere, strongly
    mask = torch.zeros(1, 64, dtype=torch.int64)
    mask[0, :2] = 1
    embedding = hooks.postprocess({"last_hidden_state": states}, {"attention_mask": mask})["embedding"]
    expected = torch.zeros(1, 256)
    expected[0, 0] = 1.0
    assert torch.allclose(embedding, expected)


@pytest.mark.parametrize("post", ["hooks", "numpy_post"])
def test_nms_drops_the_weaker_of_two_overlapping_boxes_and_what_scores_under_the_threshold(post: str) -> None:
    pipeline = PIPELINES["detect_nms"]
    boxes = np.zeros((1, 256, 4), np.float32)
    scores = np.zeros((1, 256), np.float32)
    boxes[0, :4] = [[0, 0, 32, 32], [8, 0, 40, 32], [100, 100, 132, 132], [200, 200, 232, 232]]
    scores[0, :4] = [0.9, 0.8, 0.7, 0.4]  # box 1 overlaps box 0 (IoU 0.6); box 3 is under 0.5
    raw = {"anchor_boxes": boxes, "anchor_scores": scores}
    if post == "hooks":
        answer = pipeline.hooks().postprocess({k: torch.from_numpy(v) for k, v in raw.items()}, {})
        got = {k: v.numpy() for k, v in answer.items()}
    else:
        got = pipeline.numpy_post().postprocess(raw, {})
    assert got["scores"][0, :3].tolist() == pytest.approx([0.9, 0.7, 0.0])
    assert got["boxes"][0, :2].tolist() == [[0, 0, 32, 32], [100, 100, 132, 132]]
    assert not got["boxes"][0, 2:].any() and not got["scores"][0, 2:].any()


def test_top_k_tolerates_a_near_tie_ordered_the_other_way_and_nothing_else() -> None:
    agree = PIPELINES["classify_topk"].agree
    scores = np.array([[0.40, 0.30, 0.2999, 0.20, 0.10]], np.float32)
    reference: Arrays = {"top_scores": scores, "top_classes": np.array([[7, 3, 5, 1, 9]], np.int64)}
    tied: Arrays = {"top_scores": scores, "top_classes": np.array([[7, 5, 3, 1, 9]], np.int64)}
    assert agree(tied, reference) == []  # 0.30 and 0.2999 tie within 2e-3: either order
    last: Arrays = {"top_scores": scores, "top_classes": np.array([[7, 3, 5, 1, 4]], np.int64)}
    assert agree(last, reference) == []  # the 5th place may be the 6th class, at the same score
    swapped: Arrays = {"top_scores": scores, "top_classes": np.array([[3, 7, 5, 1, 9]], np.int64)}
    assert agree(swapped, reference) != []  # 0.40 and 0.30 do not tie
    assert agree({**reference, "top_scores": scores * 1.01}, reference) != []


def test_detections_must_keep_as_many_boxes_as_the_reference() -> None:
    agree = PIPELINES["detect_nms"].agree
    boxes = np.zeros((1, 20, 4), np.float32)
    scores = np.zeros((1, 20), np.float32)
    boxes[0, :10] = np.arange(40, dtype=np.float32).reshape(10, 4)
    scores[0, :10] = np.linspace(0.9, 0.6, 10)
    reference: Arrays = {"boxes": boxes, "scores": scores}
    assert agree(reference, reference) == []
    extra_boxes, extra_scores = boxes.copy(), scores.copy()
    extra_boxes[0, 10:14] = 500.0
    extra_scores[0, 10:14] = 0.55  # four boxes more than the reference keeps
    assert agree({"boxes": extra_boxes, "scores": extra_scores}, reference) != []


def test_the_native_backend_is_ngc_s_folder_only_where_it_holds_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from client import bench_common

    monkeypatch.setattr(bench_common, "NGC_NATIVE_BACKEND", tmp_path)
    assert bench_common.native_backend_folder(None) is None  # the stand-in image's empty folder
    (tmp_path / "libtriton_onnxruntime.so").touch()
    assert bench_common.native_backend_folder(None) == tmp_path
    assert bench_common.native_backend_folder(Path("/given")) == Path("/given")


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_exported_outputs_declare_every_inner_dim(name: str, onnx_files: dict[str, Path]) -> None:
    """Triton's native onnxruntime backend refuses a config that gives a dim the model leaves open
    ('the model expects ... shape [-1,-1]'): only the batch axis stays open."""
    import onnx

    for output in onnx.load(str(onnx_files[name])).graph.output:
        dims = output.type.tensor_type.shape.dim
        assert dims[0].dim_param == "batch", output.name
        assert all(dim.HasField("dim_value") for dim in dims[1:]), (output.name, dims)


@pytest.mark.parametrize("size", [(144, 119), (57, 139), (64, 64), (7, 200), (160, 48)])
def test_the_numpy_resize_is_torch_s_bilinear_one(size: tuple[int, int]) -> None:
    """Down, up, the same size and both at once: numpy's preprocess within float rounding of the hook's
    (torch's interpolate, bilinear, align_corners=False), so that the naive model and the reference see
    the images the hooked model sees."""
    pipeline = PIPELINES["classify_images"]
    pixels = np.random.default_rng(3).integers(0, 256, size=(2, *size, 3), dtype=np.uint8)
    in_numpy = pipeline.numpy_post().preprocess({"pixels": pixels})["images"]
    in_torch = pipeline.hooks().preprocess({"pixels": torch.from_numpy(pixels)})["images"].numpy()
    assert in_numpy.shape == in_torch.shape == (2, 3, 64, 64) and in_numpy.dtype == np.float32
    assert np.abs(in_numpy - in_torch).max() < 1e-5
    if size == (64, 64):  # no resize at all: only the normalisation
        mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
        expected = (pixels.transpose(0, 3, 1, 2) / 255.0 - mean[:, None, None]) / std[:, None, None]
        assert np.abs(in_numpy - expected).max() < 1e-5


def test_classify_images_cycles_four_sizes_each_with_its_own_reference(onnx_files: dict[str, Path]) -> None:
    pipeline = PIPELINES["classify_images"]
    work = pipeline.workload(onnx_files["classify_images"], 3)
    sizes = [request.inputs["pixels"].shape for request in work.requests]
    assert len(sizes) == len(set(sizes)) == 4, sizes
    for rows, height, width, channels in sizes:
        assert rows == 3 and channels == 3
        assert IMAGE_SIDES[0] <= min(height, width) and max(height, width) <= IMAGE_SIDES[1]
    assert sizes == [
        r.inputs["pixels"].shape for r in pipeline.workload(onnx_files["classify_images"], 3).requests
    ]
    for request in work.requests:  # each reference is its own request's: numpy preprocess, ORT, postprocess
        model_inputs = pipeline.numpy_post().preprocess(request.inputs)
        raw = raw_outputs(pipeline, onnx_files["classify_images"], model_inputs)
        expected = pipeline.numpy_post().postprocess(raw, request.inputs)
        assert pipeline.agree(request.reference, expected) == []
        assert request.layout == {k: (v.dtype, v.shape) for k, v in expected.items()}
    assert PIPELINES["classify_topk"].workload(onnx_files["classify_topk"], 3).others == ()


def test_the_load_sends_each_request_in_turn_and_checks_each_against_its_reference() -> None:
    class Client:
        def __init__(self) -> None:
            self.sent: list[str] = []

        def infer(self, model: str, inputs: Any, outputs: Any) -> None:
            self.sent.append(inputs)

    client = Client()
    worker: list[tuple[Any, list[Any]]] = [("a", []), ("b", []), ("c", [])]
    timing = argparse.Namespace(warmup=0.0, duration=0.0, min_requests=5)
    latencies, _ = sync_load(client, "m", worker, timing)
    assert client.sent == ["a", "b", "c", "a", "b"] and len(latencies) == 5

    def work(value: float) -> Workload:
        x = np.full((1, 2), value, np.float32)
        return Workload(Path(), 1, {"x": x}, {"y": x}, {"y": (x.dtype, x.shape)})

    requests = Workload(**{**vars(work(0.0)), "others": (work(1.0), work(2.0))})
    asked: list[int] = []

    def ask(k: int = 0) -> dict[str, Any]:
        asked.append(k)
        return {"y": np.full((1, 2), float(k), np.float32)}

    check_answer("m", requests, ask)
    assert asked == [0, 1, 2]

    def wrong_last(k: int = 0) -> dict[str, Any]:
        return {"y": np.full((1, 2), 0.0 if k == 2 else float(k), np.float32)}

    with pytest.raises(SystemExit, match="WRONG ANSWER \\(request 2 of 3\\)"):
        check_answer("m", requests, wrong_last)


def test_images_are_ragged_where_clients_send_them_and_pre_processed_in_the_ensemble(
    tmp_path: Path, onnx_files: dict[str, Path]
) -> None:
    (tmp_path / ".onnx").mkdir()
    (tmp_path / ".onnx" / "classify_images.onnx").symlink_to(onnx_files["classify_images"])
    write_repository(tmp_path, ["classify_images"], native=True)
    config = {path.parent.name: path.read_text() for path in tmp_path.glob("*/config.pbtxt")}
    for model in ("hooked", "pre", "bls", "naive"):  # python models that take the client's images
        assert (
            'name: "pixels", data_type: TYPE_UINT8, dims: [ -1, -1, 3 ] allow_ragged_batch: true'
            in config[f"classify_images_{model}"]
        ), model
    for model in ("onnx", "onnx_native"):  # 64x64 after the pre-processing: batched as they are
        assert "allow_ragged_batch" not in config[f"classify_images_{model}"]
        assert "dims: [ 3, 64, 64 ]" in config[f"classify_images_{model}"]
    for ensemble, member in (("ensemble", "onnx"), ("ensemble_native", "onnx_native")):
        steps = [line for line in config[f"classify_images_{ensemble}"].split("model_name: ")[1:]]
        assert [step.split()[0] for step in steps] == [
            '"classify_images_pre"',
            f'"classify_images_{member}"',
            '"classify_images_post"',
        ]
    assert PIPELINES["classify_images"].models(native=True)["ensemble"] == [
        "classify_images_ensemble",
        "classify_images_pre",
        "classify_images_onnx",
        "classify_images_post",
    ]
    assert not PIPELINES["classify_topk"].preprocesses
