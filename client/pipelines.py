"""Four pipelines people build around an ONNX model, each written into a repository the four ways it can
be served (client/bench_pipelines.py measures them):

  embeddings       a BERT-shaped encoder -> mean pooling over the attention mask -> L2 normalisation
  classify_topk    a small CNN classifier -> softmax -> top-5 classes
  detect_nms       a detector head (anchor boxes and scores) -> score threshold -> NMS, 20 boxes at most
  classify_images  uint8 images, one size per request, sizes varying between requests -> resize to 64x64
                   and normalise (a pre-processing hook) -> classify_topk's CNN -> softmax -> top-5

and for a pipeline P, in one repository:

  P_hooked    our backend with the pre- and post-processing as hooks.py: one model, one hop (docs/hooks.md)
  P_ensemble  Triton's ensemble: [P_pre (a python model running hooks.py's preprocess in torch), where the
              pipeline has one ->] P_onnx (our backend, outputs left on the device) -> P_post (a python
              model running the same hooks.py postprocess in torch)
  P_bls       a python model that preprocesses (where the pipeline does), calls P_onnx through BLS (async,
              one call per request) and post-processes (the same model.py as P_pre and P_post, with
              parameter downstream_model)
  P_naive     the tutorial model.py: as_numpy -> [the pre-processing in numpy ->] session.run -> the
              post-processing in numpy
  P_ensemble_native, with native=True: the ensemble with P_onnx_native, Triton's own onnxruntime backend

The pre- and post-processing are written once in torch (examples/pipelines/P/hooks.py: the hooked model,
the ensemble's steps and the BLS model run the same functions) and once in numpy (numpy_post.py: the naive
model, and the reference every answer is checked against). The ONNX files come from torch modules with
fixed seeds; like the other benchmark models they are build outputs, not committed.

Client inputs with an open axis besides the batch's (classify_images' pixels: (N, H, W, 3)) are declared
with allow_ragged_batch in every python model that takes them, so that Triton's dynamic batcher hands one
execute requests of several sizes (without it, it batches only requests of equal shapes); the ONNX
models (ours and the native one) get 64x64 images from the pre-processing and batch as before.
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import torch
from numpy.typing import NDArray

from client.bench_common import close_to_reference
from client.load import Workload
from triton_ort.model.dtypes import from_onnx_type, from_triton_type
from triton_ort.model.onnx_files import OPSET, save_model

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "pipelines"
ZERO_COPY_MODEL_PY = ROOT / "model_repository" / "demo" / "1" / "model.py"
ANCHORS = ROOT / "client" / "anchors"
MAX_BATCH = 256  # rows an execute may gather: 32 requests of the default batch of 8
# The hooked model with one thing changed each (client.bench_pipelines --levers), for finding what its
# latency tail at c=16 on a GPU comes from: cuDNN's per-shape algorithm search, the placement
# of small outputs, and the gathered batch sizes warmed at load (multiples of the default 8 rows).
LEVERS: dict[str, dict[str, str]] = {
    "heuristic": {"cudnn_conv_algo_search": "HEURISTIC"},
    "host": {"output_placement": "host"},
    "warm": {"warmup": ",".join(str(rows) for rows in range(8, 129, 8))},
}
WAYS = ("hooked", "ensemble", "bls", "naive")
NATIVE_WAY = "ensemble_native"

Arrays = dict[str, NDArray[Any]]


class EncoderLayer(torch.nn.Module):
    """Pre-norm self-attention and feed-forward, as in BERT-style encoders; attention written out with
    matmuls so that the legacy exporter writes plain ONNX ops."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.out = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        rows, tokens, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(rows, tokens, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(width // self.heads) + mask_bias
        attended = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(rows, tokens, width)
        x = x + self.out(attended)
        out: torch.Tensor = x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))
        return out


class Encoder(torch.nn.Module):
    """input_ids, attention_mask (N, 64) -> last_hidden_state (N, 64, 256): 2 layers, 4 heads."""

    def __init__(self, vocabulary: int = 8192, tokens: int = 64, width: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocabulary, width)
        self.positions = torch.nn.Parameter(torch.randn(tokens, width) * 0.02)
        self.layers = torch.nn.ModuleList(EncoderLayer(width, 4) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids) + self.positions
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -1e4  # padding gets no attention
        for layer in self.layers:
            x = layer(x, mask_bias)
        out: torch.Tensor = self.norm(x)
        return out


def classifier() -> torch.nn.Module:
    """images (N, 3, 64, 64) -> logits (N, 1000): three strided convolutions, pooling, one Gemm."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(64, 128, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(128, 1000),
    )


class DetectorHead(torch.nn.Module):
    """features (N, 64, 16, 16) -> anchor_boxes (N, 256, 4), anchor_scores (N, 256): one anchor per cell
    of the grid, 32 pixels wide on an 8-pixel stride, moved by the offsets the head predicts (4 pixels at
    most)."""

    def __init__(self, channels: int = 64, grid: int = 16, stride: int = 8, side: int = 32) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1)
        self.predict = torch.nn.Conv2d(channels, 5, 1)
        ys, xs = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
        centres = torch.stack([xs, ys], dim=-1).reshape(-1, 2).float() * stride + stride / 2
        half = torch.full_like(centres, side / 2)
        self.anchors: torch.Tensor
        self.register_buffer("anchors", torch.cat([centres - half, centres + half], dim=1))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        predicted = self.predict(torch.relu(self.conv(features))).flatten(2).transpose(1, 2)
        boxes = self.anchors + 4.0 * torch.tanh(predicted[..., :4])
        # scores spread over 0..1, about a tenth of the anchors over the threshold, as a trained head's
        # are (this head's raw logits sit within 0.2 of 0: every score near 0.5)
        return boxes, torch.sigmoid(16.0 * predicted[..., 4] - 2.0)


@dataclass(frozen=True)
class Pipeline:
    """One pipeline: its ONNX model, what the ensemble's post step reads, its requests and its check."""

    name: str
    module: Callable[[], torch.nn.Module]
    onnx_inputs: tuple[str, ...]
    onnx_outputs: tuple[str, ...]
    post_reads: tuple[str, ...]
    """Client inputs postprocess reads besides the model's outputs (the ensemble maps them to its step)."""
    make_inputs: Callable[[int, np.random.Generator], Arrays]
    """A request of that many rows, as the client sends it."""
    agree: Callable[[Arrays, Arrays], list[str]]
    """Problems of an answer against the reference ([] when it agrees)."""
    requests: int = 1
    """Different requests in a workload (make_inputs with seeds 0, 1, ...), which the load cycles through:
    classify_images' images of several sizes."""

    @property
    def folder(self) -> Path:
        return EXAMPLES / self.name

    def hooks(self) -> ModuleType:
        return _load(self.folder / "hooks.py", f"{self.name}_hooks")

    def numpy_post(self) -> ModuleType:
        return _load(self.folder / "numpy_post.py", f"{self.name}_numpy_post")

    @property
    def preprocesses(self) -> bool:
        """Whether the pipeline has a pre-processing step (hooks.py and numpy_post.py define preprocess)."""
        return hasattr(self.hooks(), "preprocess")

    def model_inputs(self, batch: int, rng: np.random.Generator) -> Arrays:
        """The ONNX model's inputs for a request of `batch` rows: the client's, pre-processed in numpy where
        the pipeline pre-processes."""
        inputs = self.make_inputs(batch, rng)
        numpy_post = self.numpy_post()
        return numpy_post.preprocess(inputs) if hasattr(numpy_post, "preprocess") else inputs

    def models(self, native: bool = False) -> dict[str, list[str]]:
        """Each way of serving it -> the models (of the repository) its requests go through."""
        pre = [f"{self.name}_pre"] if self.preprocesses else []
        ways = {
            "hooked": [f"{self.name}_hooked"],
            "ensemble": [f"{self.name}_ensemble", *pre, f"{self.name}_onnx", f"{self.name}_post"],
            "bls": [f"{self.name}_bls", f"{self.name}_onnx"],
            "naive": [f"{self.name}_naive"],
        }
        if native:
            ways[NATIVE_WAY] = [
                f"{self.name}_ensemble_native",
                *pre,
                f"{self.name}_onnx_native",
                f"{self.name}_post",
            ]
        return ways

    def workload(self, onnx_path: Path, batch: int) -> Workload:
        """`self.requests` requests of `batch` rows (seeds 0, 1, ...: the first is the Workload, the others
        its `others`), each with its reference answer (numpy_post's preprocess where there is one, ORT on
        the CPU, then numpy_post's postprocess) and the answer's layout."""
        from onnxruntime import InferenceSession

        session = InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        numpy_post = self.numpy_post()
        works = []
        for seed in range(self.requests):
            inputs = self.make_inputs(batch, np.random.default_rng(seed))
            model_inputs = numpy_post.preprocess(inputs) if hasattr(numpy_post, "preprocess") else inputs
            raw = session.run(list(self.onnx_outputs), model_inputs)
            reference = numpy_post.postprocess(dict(zip(self.onnx_outputs, raw, strict=True)), inputs)
            layout = {name: (array.dtype, array.shape) for name, array in reference.items()}
            works.append(Workload(onnx_path, batch, inputs, reference, layout))
        return Workload(**{**vars(works[0]), "others": tuple(works[1:])})


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _token_inputs(batch: int, rng: np.random.Generator) -> Arrays:
    """Token ids below the vocabulary's size and a mask of 8 to 64 real tokens, the rest padding (id 0)."""
    lengths = rng.integers(8, 65, size=batch)
    mask = (np.arange(64)[None, :] < lengths[:, None]).astype(np.int64)
    ids = rng.integers(1, 8192, size=(batch, 64)).astype(np.int64) * mask
    return {"input_ids": ids, "attention_mask": mask}


IMAGE_SIDES = (48, 160)
"""classify_images: the smallest and largest side of a request's images (the classifier takes 64x64)."""


def _image_inputs(batch: int, rng: np.random.Generator) -> Arrays:
    """A request of `batch` decoded images of one size (height and width drawn from IMAGE_SIDES by the
    seed), uint8 HWC: smooth gradients and blobs with noise, so that the resize's interpolation matters."""
    height, width = (int(side) for side in rng.integers(IMAGE_SIDES[0], IMAGE_SIDES[1] + 1, size=2))
    ys, xs = np.meshgrid(np.linspace(0, 1, height), np.linspace(0, 1, width), indexing="ij")
    phases = rng.uniform(0, 2 * np.pi, size=(batch, 1, 1, 3))
    waves = np.sin(6 * xs[None, :, :, None] + 4 * ys[None, :, :, None] + phases)
    noise = rng.normal(0, 0.25, size=(batch, height, width, 3))
    return {"pixels": np.clip(127.5 + 100 * waves + 40 * noise, 0, 255).astype(np.uint8)}


def _same_top_k(answer: Arrays, reference: Arrays) -> list[str]:
    """Top-k answers agree when their scores do (rtol 2e-3, atol 1e-6: the scores are about 1e-3) and so
    do their classes, except where two scores are within that tolerance: a GPU's rounding (TF32
    convolutions) may order a near-tie the other way, or, at the last place, pick the (k+1)-th class."""
    from triton_ort.harness.reference import compare

    problems = compare(
        {"top_scores": answer["top_scores"]}, {"top_scores": reference["top_scores"]}, 2e-3, 1e-6
    )
    for row, (classes, scores) in enumerate(
        zip(reference["top_classes"], reference["top_scores"], strict=True)
    ):
        for place, expected in enumerate(classes):
            if answer["top_classes"][row][place] == expected:
                continue
            near = [scores[i] for i in (place - 1, place + 1) if 0 <= i < len(scores)]
            tie = place == len(classes) - 1 or any(
                abs(scores[place] - n) <= 2e-3 * scores[place] for n in near
            )
            if not tie:
                problems.append(
                    f"row {row}: class {answer['top_classes'][row][place]} at place {place}, not {expected}"
                )
    return problems


def _same_detections(answer: Arrays, reference: Arrays) -> list[str]:
    """Detections agree when the answer keeps as many boxes as the reference (within 10 %) and at least
    90 % of the reference's boxes are among them (same box within 0.05 pixel, same score within 2e-3):
    NMS keeps or drops a box on a comparison, and a GPU's rounding (TF32 convolutions) can tip one whose
    score or overlap sits at a threshold."""
    problems = []
    for row, (boxes, scores) in enumerate(zip(reference["boxes"], reference["scores"], strict=True)):
        kept = scores > 0
        got_boxes, got_scores = answer["boxes"][row], answer["scores"][row]
        found = 0
        for box, score in zip(boxes[kept], scores[kept], strict=True):
            near = np.abs(got_boxes - box).max(axis=1) < 0.05
            found += bool(np.any(near & (np.abs(got_scores - score) < 2e-3)))
        if found < 0.9 * kept.sum() or abs(int((got_scores > 0).sum()) - int(kept.sum())) > 0.1 * kept.sum():
            problems.append(
                f"row {row}: {(got_scores > 0).sum()} detections, {found} of the reference's {kept.sum()}"
            )
    return problems


PIPELINES = {
    p.name: p
    for p in (
        Pipeline(
            "embeddings",
            Encoder,
            ("input_ids", "attention_mask"),
            ("last_hidden_state",),
            ("attention_mask",),
            _token_inputs,
            close_to_reference,
        ),
        Pipeline(
            "classify_topk",
            classifier,
            ("images",),
            ("logits",),
            (),
            lambda batch, rng: {"images": rng.standard_normal((batch, 3, 64, 64)).astype(np.float32)},
            _same_top_k,
        ),
        Pipeline(
            "detect_nms",
            DetectorHead,
            ("features",),
            ("anchor_boxes", "anchor_scores"),
            (),
            lambda batch, rng: {"features": rng.standard_normal((batch, 64, 16, 16)).astype(np.float32)},
            _same_detections,
        ),
        Pipeline(
            "classify_images",
            classifier,
            ("images",),
            ("logits",),
            (),
            _image_inputs,
            _same_top_k,
            requests=4,
        ),
    )
}


def export(pipeline: Pipeline, path: Path) -> None:
    torch.manual_seed(0)
    module = pipeline.module().eval()
    example = tuple(torch.from_numpy(a) for a in pipeline.model_inputs(2, np.random.default_rng(0)).values())
    path.parent.mkdir(parents=True, exist_ok=True)
    axes = {name: {0: "batch"} for name in (*pipeline.onnx_inputs, *pipeline.onnx_outputs)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            module,
            example,
            str(path),
            input_names=list(pipeline.onnx_inputs),
            output_names=list(pipeline.onnx_outputs),
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    model = onnx.load(str(path))
    # The exporter leaves some outputs' inner dims symbolic where its shape inference stops (the detector's
    # anchor_scores: [batch, ?]); Triton's native backend then refuses a config that gives them. Declare
    # them as a run of the module has them.
    with torch.no_grad():
        produced = module(*example)
    for output, tensor in zip(model.graph.output, _as_tuple(produced), strict=True):
        for dim, size in list(zip(output.type.tensor_type.shape.dim, tensor.shape, strict=True))[1:]:
            dim.dim_value = int(size)  # setting the value clears the symbolic name (a oneof)
    save_model(model, path)  # the IR version the opset needs (scripts/build_models.py)


def _as_tuple(produced: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return produced if isinstance(produced, tuple) else (produced,)


# --- the repository ---------------------------------------------------------------------------------

Tensor = tuple[str, str, list[int]]
"""(name, TYPE_..., dims without the batch axis)."""


def _onnx_io(pipeline: Pipeline, path: Path) -> tuple[list[Tensor], list[Tensor]]:
    """The ONNX model's inputs and outputs as config.pbtxt declares them. The dims are read off a run:
    the exporter leaves some outputs' dims symbolic where its shape inference stops."""
    from onnxruntime import InferenceSession

    session = InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = pipeline.model_inputs(2, np.random.default_rng(0))
    outputs = session.run(list(pipeline.onnx_outputs), inputs)
    nodes = (*session.get_inputs(), *session.get_outputs())
    types = {e.name: from_onnx_type(e.type, f"{path.name}: {e.name}").config_name for e in nodes}

    def tensors(arrays: Arrays) -> list[Tensor]:
        return [(name, types[name], list(array.shape[1:])) for name, array in arrays.items()]

    return tensors(inputs), tensors(dict(zip(pipeline.onnx_outputs, outputs, strict=True)))


def _client_io(hooks: ModuleType) -> tuple[list[Tensor], list[Tensor]]:
    def tensors(declared: dict[str, tuple[str, list[int]]]) -> list[Tensor]:
        return [
            (name, from_triton_type(kind, f"hooks {name}").config_name, list(dims[1:]))
            for name, (kind, dims) in declared.items()
        ]

    return tensors(hooks.INPUTS), tensors(hooks.OUTPUTS)


def _io_text(kind: str, tensors: list[Tensor], ragged: bool = False) -> str:
    """config.pbtxt's inputs or outputs; with `ragged`, an input with an open axis (an image's height and
    width) gets allow_ragged_batch, so that the dynamic batcher gathers requests of different sizes."""

    def entry(name: str, kind_of: str, dims: list[int]) -> str:
        extra = " allow_ragged_batch: true" if ragged and -1 in dims else ""
        return f'{{ name: "{name}", data_type: {kind_of}, dims: [ {", ".join(map(str, dims))} ]{extra} }}'

    return f"{kind} [ {', '.join(entry(*t) for t in tensors)} ]\n"


def _config(name: str, backend: str, inputs: list[Tensor], outputs: list[Tensor], **parameters: str) -> str:
    text = f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: {MAX_BATCH}\n'
    text += _io_text("input", inputs, ragged=True) + _io_text("output", outputs)
    text += "instance_group [ { kind: KIND_AUTO, count: 1 } ]\n"
    text += "dynamic_batching { max_queue_delay_microseconds: 0 }\n"
    if backend == "python":
        parameters = {"FORCE_CPU_ONLY_INPUT_TENSORS": "no", **parameters}
    if parameters:
        entries = ", ".join(
            f'{{ key: "{k}", value: {{ string_value: "{v}" }} }}' for k, v in parameters.items()
        )
        text += f"parameters [ {entries} ]\n"
    return text


def _ensemble(name: str, onnx_model: str, pipeline: Pipeline, io: tuple[list[Tensor], list[Tensor]]) -> str:
    def maps(kind: str, names: tuple[str, ...]) -> str:
        return " ".join(f'{kind} {{ key: "{n}", value: "{n}" }}' for n in names)

    client_in, client_out = io
    outputs = tuple(n for n, _, _ in client_out)
    steps = []
    if pipeline.preprocesses:  # the client's inputs -> the ONNX model's, by the python pre step
        steps.append(
            f'{{ model_name: "{pipeline.name}_pre" model_version: -1 '
            f"{maps('input_map', tuple(n for n, _, _ in client_in))} "
            f"{maps('output_map', pipeline.onnx_inputs)} }}"
        )
    steps += [
        f'{{ model_name: "{onnx_model}" model_version: -1 {maps("input_map", pipeline.onnx_inputs)} '
        f"{maps('output_map', pipeline.onnx_outputs)} }}",
        f'{{ model_name: "{pipeline.name}_post" model_version: -1 '
        f"{maps('input_map', pipeline.onnx_outputs + pipeline.post_reads)} {maps('output_map', outputs)} }}",
    ]
    return (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {MAX_BATCH}\n'
        + _io_text("input", client_in)
        + _io_text("output", client_out)
        + f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n"
    )


def _model(repository: Path, name: str, config: str, files: dict[str, Path]) -> None:
    version = repository / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    for target, source in files.items():
        (version / target).unlink(missing_ok=True)
        if source.suffix == ".onnx":
            (version / target).symlink_to(source.resolve())  # one ONNX file, served several ways
        else:
            shutil.copy(source, version / target)
    (repository / name / "config.pbtxt").write_text(config)


def write_repository(repository: Path, names: list[str], native: bool = False) -> dict[str, Path]:
    """Every pipeline in `names`, every way (and the native ensemble with native=True); the ONNX files
    are built once, under repository/.onnx. Returns each pipeline's ONNX file."""
    built = {}
    for name in names:
        pipeline = PIPELINES[name]
        onnx_path = repository / ".onnx" / f"{name}.onnx"
        if not onnx_path.exists():
            export(pipeline, onnx_path)
        built[name] = onnx_path
        onnx_io = _onnx_io(pipeline, onnx_path)
        client_io = _client_io(pipeline.hooks())
        hooks, numpy_post = pipeline.folder / "hooks.py", pipeline.folder / "numpy_post.py"
        onnx_outputs = onnx_io[1]
        post_inputs = onnx_outputs + [t for t in client_io[0] if t[0] in pipeline.post_reads]
        onnx_names = ",".join(pipeline.onnx_outputs)
        models = {
            f"{name}_hooked": (
                _config(f"{name}_hooked", "python", *client_io, hooks="hooks.py"),
                {"model.py": ZERO_COPY_MODEL_PY, "hooks.py": hooks, "model.onnx": onnx_path},
            ),
            f"{name}_onnx": (
                _config(f"{name}_onnx", "python", *onnx_io, output_placement="device"),
                {"model.py": ZERO_COPY_MODEL_PY, "model.onnx": onnx_path},
            ),
            f"{name}_post": (
                _config(f"{name}_post", "python", post_inputs, client_io[1], onnx_outputs=onnx_names),
                {"model.py": ANCHORS / "pipeline_hooks_model.py", "hooks.py": hooks},
            ),
            f"{name}_ensemble": (_ensemble(f"{name}_ensemble", f"{name}_onnx", pipeline, client_io), {}),
            f"{name}_bls": (
                _config(
                    f"{name}_bls",
                    "python",
                    *client_io,
                    downstream_model=f"{name}_onnx",
                    onnx_outputs=onnx_names,
                    post_reads=",".join(pipeline.post_reads),
                ),
                {"model.py": ANCHORS / "pipeline_hooks_model.py", "hooks.py": hooks},
            ),
            f"{name}_naive": (
                _config(
                    f"{name}_naive",
                    "python",
                    *client_io,
                    FORCE_CPU_ONLY_INPUT_TENSORS="yes",
                    onnx_outputs=onnx_names,
                ),
                {
                    "model.py": ANCHORS / "pipeline_naive_model.py",
                    "numpy_post.py": numpy_post,
                    "model.onnx": onnx_path,
                },
            ),
        }
        if pipeline.preprocesses:
            models[f"{name}_pre"] = (
                _config(f"{name}_pre", "python", client_io[0], onnx_io[0], step="pre"),
                {"model.py": ANCHORS / "pipeline_hooks_model.py", "hooks.py": hooks},
            )
        for lever, parameters in LEVERS.items():  # the hooked model with one thing changed
            inputs, outputs = client_io
            models[f"{name}_hooked_{lever}"] = (
                _config(f"{name}_hooked_{lever}", "python", inputs, outputs, hooks="hooks.py", **parameters),
                models[f"{name}_hooked"][1],
            )
        if native:
            models[f"{name}_onnx_native"] = (
                _config(f"{name}_onnx_native", "onnxruntime", *onnx_io),
                {"model.onnx": onnx_path},
            )
            models[f"{name}_ensemble_native"] = (
                _ensemble(f"{name}_ensemble_native", f"{name}_onnx_native", pipeline, client_io),
                {},
            )
        for model, (config, files) in models.items():
            _model(repository, model, config, files)
    return built
