"""Plot a benchmark's JSON: p50 latency and throughput against concurrency, one line per anchor.

python -m client.bench_plot results/bench-cpu.json results/bench-cpu.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator


def host_title(environment: dict[str, Any]) -> str:
    """The machine the figures are from: the GPU's name on a GPU host, else the CPU's and its cores."""
    if "gpu" in environment:
        return str(environment["gpu"])
    cores = f", {environment['cores']} cores" if environment.get("cores") else ""
    return f"{environment.get('cpu', 'unknown CPU')}{cores}"


def draw(report: dict[str, Any]) -> Figure:
    """The figure for a benchmark report (the JSON's content)."""
    results = report["results"]
    models = list(dict.fromkeys(r["model"] for r in results))
    figure, axes = plt.subplots(len(models), 2, figsize=(13, 3.6 * len(models)), squeeze=False)
    for row, model in enumerate(models):
        series: dict[str, list[dict[str, float]]] = {}
        for r in results:
            if r["model"] == model:
                series.setdefault(f"{r['anchor']} ({r['transport']})", []).append(r)
        # more anchors than the default cycle's ten colours
        colours = list(cast(ListedColormap, plt.get_cmap("tab20")).colors)  # type: ignore[arg-type]
        for index, (label, points) in enumerate(series.items()):
            points.sort(key=lambda p: p["concurrency"])
            x = [p["concurrency"] for p in points]
            style = {"color": colours[index % len(colours)], "marker": "osD^v<>"[index % 7]}
            axes[row][0].plot(x, [p["p50_us"] / 1e3 for p in points], label=label, **style)
            axes[row][1].plot(x, [p["requests_per_s"] * p["batch"] for p in points], label=label, **style)
        batch = next(r["batch"] for r in results if r["model"] == model)
        concurrencies = sorted({int(r["concurrency"]) for r in results if r["model"] == model})
        axes[row][0].set(title=f"{model}, batch {batch}: p50 latency", xlabel="concurrency", ylabel="ms")
        axes[row][1].set(title=f"{model}: throughput", xlabel="concurrency", ylabel="rows/s")
        for ax in axes[row]:
            ax.set_xscale("log")
            # ticks at the concurrencies measured (1, 4, 16), not at the log scale's powers
            ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    env = report["environment"]
    figure.suptitle(f"{host_title(env)}, {env['date']}, onnxruntime {env['onnxruntime']}")
    figure.tight_layout()
    return figure


def plot(results_path: Path, image_path: Path) -> None:
    figure = draw(json.loads(results_path.read_text()))
    image_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(image_path, dpi=110)
    plt.close(figure)
    print(f"wrote {image_path}")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m client.bench_plot",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("results", type=Path, help="the benchmark's JSON (python -m client.bench --out)")
    parser.add_argument("image", type=Path, help="the plot to write (.png, .svg, .pdf)")
    args = parser.parse_args()
    if not args.results.is_file():
        parser.error(f"{args.results}: no such file; run the benchmark first (make bench)")
    plot(args.results, args.image)


if __name__ == "__main__":
    main()
