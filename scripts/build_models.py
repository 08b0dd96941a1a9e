"""Build the ONNX files of the model repository from small torch modules, deterministically.

    python scripts/build_models.py --out model_repository                 # the demo
    python scripts/build_models.py --bench --out bench_repository --models demo mlp4096

Weights come from a fixed seed, so every build writes the same graph and the same numbers; the .onnx files
are build outputs and are not committed. With --bench, each model is written into a benchmark repository
several times: served by our zero-copy model.py (`<name>`), with each output placement forced
(`<name>_device`, `<name>_host`) and with CUDA graphs (`<name>_graph`), by the benchmark's anchors in
client/anchors/ (the naive tutorial model `<name>_naive`, the simplest zero-copy model `<name>_plain`, the
transport-floor models that return zeros without running ORT `<name>_null_host`, `<name>_null_device`,
`<name>_null_kernel`), by Triton's native onnxruntime backend (`<name>_native`, measured where the host
has that backend), and with the instance counts and queue delays of the sweep
(`<name>_i<count>_d<microseconds>`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx
import torch

from triton_ort.model.onnx_files import OPSET, save_model


def demo_classifier() -> torch.nn.Module:
    """Shaped like the classifier in our users' reports: 2010 embedding features -> 2 logits."""
    return torch.nn.Sequential(torch.nn.Linear(2010, 512), torch.nn.ReLU(), torch.nn.Linear(512, 2))


def mlp(width: int) -> Callable[[], torch.nn.Module]:
    """Four Gemm layers `width` wide: compute-bound at 4096 on a GPU, mid-size at 1024 on a CPU."""

    def factory() -> torch.nn.Module:
        layers: list[torch.nn.Module] = []
        for _ in range(4):
            layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers[:-1])

    return factory


MODELS: dict[str, tuple[Callable[[], torch.nn.Module], str, str, int]] = {
    # name: (module factory, input name, output name, input width)
    "demo": (demo_classifier, "np_script_embeddings", "np_logits", 2010),
    "mlp1024": (mlp(1024), "x", "y", 1024),
    "mlp4096": (mlp(4096), "x", "y", 4096),
}

ROOT = Path(__file__).resolve().parent.parent
ZERO_COPY_MODEL_PY = ROOT / "model_repository" / "demo" / "1" / "model.py"
ANCHORS = ROOT / "client" / "anchors"
NAIVE_MODEL_PY = ANCHORS / "naive_model.py"
NULL_MODEL_PY = ANCHORS / "null_model.py"
PLAIN_MODEL_PY = ANCHORS / "plain_model.py"


@dataclass(frozen=True)
class Serving:
    """How one benchmark variant serves a model: which model.py (None: a backend that reads model.onnx
    itself), how many instances, how it batches."""

    model_py: Path | None
    instances: int = 1
    queue_delay_us: int = 0
    parameters: tuple[tuple[str, str], ...] = ()

    @property
    def backend(self) -> str:
        """The python backend runs a model.py; without one, Triton's native onnxruntime backend."""
        return "python" if self.model_py is not None else "onnxruntime"


# The configuration each benchmarked model ships with (instances, queue delay), chosen by the sweep
# (`client.bench --sweep`; docs/benchmarks.md), and how many rows an execute may gather: the demo's as in
# model_repository/demo/config.pbtxt, four 1024-row requests for the MLPs.
SHIPPED = {"demo": (2, 0), "mlp1024": (1, 0), "mlp4096": (2, 0)}
MAX_BATCH = {"demo": 1024, "mlp1024": 4096, "mlp4096": 4096}
# Parameters a model ships with beyond those: the demo's CUDA graphs (model_repository/demo/config.pbtxt,
# `optimization { cuda { graphs: true } }`).
SHIPPED_PARAMETERS: dict[str, tuple[tuple[str, str], ...]] = {"demo": (("cuda_graph", "true"),)}
SWEEP = [(n, d) for n in (1, 2, 4) for d in (0, 100, 500)]
# Lanes of the one in-flight instance that client.bench measures (`<name>_inflight<K>`).
INFLIGHT_LANES = (2, 4)


def bench_variants(name: str) -> dict[str, Serving]:
    instances, delay = SHIPPED[name]

    def ours(*parameters: tuple[str, str], count: int = instances, queue_delay: int = delay) -> Serving:
        """Our model.py as the model ships (SHIPPED, SHIPPED_PARAMETERS), with `parameters` on top."""
        merged = dict(SHIPPED_PARAMETERS.get(name, ())) | dict(parameters)
        return Serving(ZERO_COPY_MODEL_PY, count, queue_delay, tuple(merged.items()))

    def null(output: str) -> Serving:
        """The transport floor (client/anchors/null_model.py): zeros from `output`, no ORT."""
        return Serving(NULL_MODEL_PY, instances, delay, (("null_output", output),))

    variants = {
        name: ours(),
        f"{name}_device": ours(("output_placement", "device")),
        f"{name}_host": ours(("output_placement", "host")),
        f"{name}_graph": ours(("cuda_graph", "true")),
        f"{name}_naive": Serving(NAIVE_MODEL_PY, instances, delay),
        f"{name}_plain": Serving(PLAIN_MODEL_PY, instances, delay),
        f"{name}_null_host": null("host"),
        f"{name}_null_device": null("device"),
        f"{name}_null_kernel": null("kernel"),
        # one instance keeping requests in flight on K lanes (parameter inflight_lanes; Triton 2.47 and later)
        # (without CUDA graphs, which in-flight lanes refuse: docs/inflight.md)
        **{
            f"{name}_inflight{k}": ours(("inflight_lanes", str(k)), ("cuda_graph", "false"), count=1)
            for k in INFLIGHT_LANES
        },
        # Triton's native onnxruntime backend on the same file, served where the host has it (client.bench)
        f"{name}_native": Serving(None, instances, delay),
        # and by instance count, for what each costs beside ours (diagnostics.bench_instances --variants)
        **{f"{name}_native_i{count}": Serving(None, count, 0) for count in (1, 2, 4)},
    }
    for count, queue_delay in SWEEP:
        variants[f"{name}_i{count}_d{queue_delay}"] = ours(count=count, queue_delay=queue_delay)
    return variants


def bench_config(
    name: str, input_name: str, output_name: str, width: int, out_width: int, serving: Serving, max_batch: int
) -> str:
    # The naive model reads inputs with as_numpy(), so it keeps the backend's default CPU-only inputs.
    force_cpu = "yes" if serving.model_py == NAIVE_MODEL_PY else "no"
    parameters = [("FORCE_CPU_ONLY_INPUT_TENSORS", force_cpu)] if serving.backend == "python" else []
    parameters += serving.parameters
    parameter_text = ", ".join(f'{{ key: "{k}", value: {{ string_value: "{v}" }} }}' for k, v in parameters)
    return f"""name: "{name}"
backend: "{serving.backend}"
max_batch_size: {max_batch}
input [ {{ name: "{input_name}", data_type: TYPE_FP32, dims: [ {width} ] }} ]
output [ {{ name: "{output_name}", data_type: TYPE_FP32, dims: [ {out_width} ] }} ]
instance_group [ {{ kind: KIND_AUTO, count: {serving.instances} }} ]
dynamic_batching {{ max_queue_delay_microseconds: {serving.queue_delay_us} }}
""" + (f"parameters [ {parameter_text} ]\n" if parameters else "")


def export(module: torch.nn.Module, path: Path, input_name: str, output_name: str, width: int) -> None:
    module.eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    example = torch.zeros(2, width)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            module,
            (example,),
            str(path),
            input_names=[input_name],
            output_names=[output_name],
            dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,
        )
    # torch's exporter stamps an IR version of its own choosing; re-stamp the one the opset needs, which
    # the installed ORT reads (refused with the fix if it does not).
    save_model(onnx.load(str(path)), path)


def build(out: Path, names: list[str], bench: bool = False) -> None:
    for name in names:
        factory, input_name, output_name, width = MODELS[name]
        torch.manual_seed(0)
        module = factory()
        target = out / name / "1" / "model.onnx"
        export(module, target, input_name, output_name, width)
        print(f"wrote {target} ({target.stat().st_size} bytes)")
        if bench:
            out_width = int(module(torch.zeros(1, width)).shape[1])
            write_bench_models(out, name, target, input_name, output_name, width, out_width)


def write_bench_models(
    out: Path, name: str, onnx_path: Path, input_name: str, output_name: str, width: int, out_width: int
) -> None:
    for served_name, serving in bench_variants(name).items():
        version = out / served_name / "1"
        version.mkdir(parents=True, exist_ok=True)
        if serving.model_py is not None:
            shutil.copy(serving.model_py, version / "model.py")
        if served_name != name:  # every variant shares the one ONNX file
            (version / "model.onnx").unlink(missing_ok=True)
            os.link(onnx_path, version / "model.onnx")  # a hard link: the 4096-wide MLP is 268 MB
        config = bench_config(
            served_name, input_name, output_name, width, out_width, serving, MAX_BATCH[name]
        )
        (out / served_name / "config.pbtxt").write_text(config)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("model_repository"))
    parser.add_argument("--models", nargs="*", default=["demo"], choices=sorted(MODELS))
    parser.add_argument("--bench", action="store_true", help="also write configs and the naive twin")
    args = parser.parse_args()
    build(args.out, args.models, args.bench)


if __name__ == "__main__":
    main()
