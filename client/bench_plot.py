"""Plot a benchmark's JSON: p50 latency and throughput against concurrency, one line per anchor.

python -m client.bench_plot results/bench-gpu.json docs/bench-gpu.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import cast

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap


def plot(results_path: Path, image_path: Path) -> None:
    report = json.loads(results_path.read_text())
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
        axes[row][0].set(title=f"{model}, batch {batch}: p50 latency", xlabel="concurrency", ylabel="ms")
        axes[row][1].set(title=f"{model}: throughput", xlabel="concurrency", ylabel="rows/s")
        for ax in axes[row]:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    env = report["environment"]
    figure.suptitle(f"{env.get('gpu', env.get('cpu'))}, {env['date']}, onnxruntime {env['onnxruntime']}")
    figure.tight_layout()
    image_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(image_path, dpi=110)
    print(f"wrote {image_path}")


if __name__ == "__main__":
    plot(Path(sys.argv[1]), Path(sys.argv[2]))
