"""`triton-ort perf --plot FILE.svg`: latency against throughput, one line per model, as SVG text (no
plotting library needed). Each point is one concurrency: its p50 as a dot labelled c=N, and a bar from p50
up to p99."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 720, 440
LEFT, RIGHT, TOP, BOTTOM = 80, 160, 40, 60
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


def nice_ticks(top: float, count: int = 5, bottom: float = 0.0) -> list[float]:
    """Round tick values from at most `bottom` to at least `top` (about `count` of them): an axis that
    starts where the data does, not at 0, so that points close together are told apart."""
    if top <= bottom:
        bottom, top = (0.0, 1.0) if top <= 0 else (top * 0.9, top * 1.1)
    raw = (top - bottom) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(bottom / step + 1e-9)
    return [round(i * step, 12) for i in range(first, math.ceil(top / step - 1e-9) + 1)]


def _label(value: float) -> str:
    return f"{value:g}" if value < 1e4 else f"{value / 1e3:g}k"


def svg_plot(points: Sequence[Any], title: str) -> str:
    """Points with model, concurrency, infer_per_s, p50_us and p99_us (triton_ort.cli.perf.Point)."""
    rates = [p.infer_per_s for p in points] or [1.0]
    latencies = [p.p50_us / 1e3 for p in points] + [p.p99_us / 1e3 for p in points] or [1.0]
    xs = nice_ticks(max(rates), bottom=min(rates))
    ys = nice_ticks(max(latencies), bottom=min(latencies))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(value: float) -> float:
        return LEFT + plot_w * (value - xs[0]) / (xs[-1] - xs[0])

    def y(value: float) -> float:
        return TOP + plot_h * (1 - (value - ys[0]) / (ys[-1] - ys[0]))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
    ]
    for value in xs:
        parts.append(
            f'<line x1="{x(value):.1f}" y1="{TOP}" x2="{x(value):.1f}" y2="{TOP + plot_h}" stroke="#ddd"/>'
        )
        parts.append(
            f'<text x="{x(value):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{_label(value)}</text>'
        )
    for value in ys:
        parts.append(
            f'<line x1="{LEFT}" y1="{y(value):.1f}" x2="{LEFT + plot_w}" y2="{y(value):.1f}" stroke="#ddd"/>'
        )
        parts.append(f'<text x="{LEFT - 8}" y="{y(value) + 4:.1f}" text-anchor="end">{_label(value)}</text>')
    parts.append(
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 18}" text-anchor="middle">throughput (infer/s)</text>'
    )
    parts.append(
        f'<text x="20" y="{TOP + plot_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 20 {TOP + plot_h / 2})">latency (ms): p50, bar to p99</text>'
    )
    models = list(dict.fromkeys(p.model for p in points))
    for index, model in enumerate(models):
        colour = COLOURS[index % len(COLOURS)]
        mine = sorted(
            (p for p in points if p.model == model), key=lambda p: (p.request_rate or 0, p.concurrency)
        )
        line = " ".join(f"{x(p.infer_per_s):.1f},{y(p.p50_us / 1e3):.1f}" for p in mine)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for p in mine:
            px, p50, p99 = x(p.infer_per_s), y(p.p50_us / 1e3), y(p.p99_us / 1e3)
            parts.append(
                f'<line x1="{px:.1f}" y1="{p50:.1f}" x2="{px:.1f}" y2="{p99:.1f}" stroke="{colour}"/>'
            )
            parts.append(f'<circle cx="{px:.1f}" cy="{p50:.1f}" r="4" fill="{colour}"/>')
            parts.append(f'<text x="{px + 6:.1f}" y="{p50 + 14:.1f}" fill="{colour}">{p.load}</text>')
        legend_y = TOP + 10 + 20 * index
        parts.append(
            f'<rect x="{LEFT + plot_w + 16}" y="{legend_y - 9}" width="12" height="12" fill="{colour}"/>'
        )
        parts.append(f'<text x="{LEFT + plot_w + 34}" y="{legend_y + 1}">{escape(model)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
