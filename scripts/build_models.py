"""Build the ONNX files of the model repository from small torch modules, deterministically.

    python scripts/build_models.py --out model_repository

Weights come from a fixed seed, so every build writes the same graph and the same numbers; the .onnx files
are build outputs and are not committed.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable
from pathlib import Path

import torch


def demo_classifier() -> torch.nn.Module:
    """Shaped like the classifier in our users' reports: 2010 embedding features -> 2 logits."""
    return torch.nn.Sequential(torch.nn.Linear(2010, 512), torch.nn.ReLU(), torch.nn.Linear(512, 2))


MODELS: dict[str, tuple[Callable[[], torch.nn.Module], str, str, int]] = {
    # name: (module factory, input name, output name, input width)
    "demo": (demo_classifier, "np_script_embeddings", "np_logits", 2010),
}


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
            opset_version=17,
            dynamo=False,
        )


def build(out: Path, names: list[str]) -> None:
    for name in names:
        factory, input_name, output_name, width = MODELS[name]
        torch.manual_seed(0)
        target = out / name / "1" / "model.onnx"
        export(factory(), target, input_name, output_name, width)
        print(f"wrote {target} ({target.stat().st_size} bytes)")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("model_repository"))
    parser.add_argument("--models", nargs="*", default=["demo"], choices=sorted(MODELS))
    args = parser.parse_args()
    build(args.out, args.models)


if __name__ == "__main__":
    main()
