"""A tiny benchmark run as `make bench` runs it (CPU, every anchor, PyTriton included): clean output when
stderr is not a terminal, aligned tables, a plot with the measured concurrencies, and no files left behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from client.bench_common import NGC_NATIVE_BACKEND, native_backend_folder
from client.bench_plot import draw
from tests.support.commands import python_module
from tests.support.paths import ROOT

pytestmark = pytest.mark.integration

CONCURRENCIES = [1, 3]
# ONNX Runtime itself writes its telemetry session id to $TMPDIR/.ses (any program that makes a session
# does); it is no file of ours.
ORT_OWN = {".ses"}


def columns(line: str) -> list[int]:
    """Where each column of a dashed header underline starts."""
    return [i for i, c in enumerate(line) if c == "-" and (i == 0 or line[i - 1] == " ")]


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    work = tmp_path_factory.mktemp("bench")
    tmp, cache = work / "tmp", work / "cache"
    tmp.mkdir()
    cache.mkdir()
    # TMPDIR and the cache folder (PyTriton's default workspace is under ~/.cache/pytriton) of their own,
    # to see what the run leaves behind.
    env = {**os.environ, "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(cache)}
    repository = work / "bench_repository"
    build = [
        sys.executable,
        "scripts/build_models.py",
        "--bench",
        "--out",
        str(repository),
        "--models",
        "demo",
    ]
    subprocess.run(build, cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    result = python_module(
        "client.bench",
        *("--models", "demo", "--repository", str(repository), "--duration", "0.2", "--warmup", "0.1"),
        *("--min-requests", "5", "--client-processes", "1", "--concurrency", *map(str, CONCURRENCIES)),
        *("--out", str(work / "results" / "bench.json")),
        timeout=900,
        env=env,
    )
    return result, work


def test_output_has_no_terminal_codes_when_not_a_terminal(
    bench_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _ = bench_run
    assert "\x1b" not in result.stdout + result.stderr
    assert "\r" not in result.stdout + result.stderr  # no progress line either
    # but progress as plain lines on stderr, one per measurement with the seconds since start: a log
    # shows the run moving, and where its time went
    progress = re.compile(r"^ *\d+ s  measuring demo ")
    assert any(progress.match(line) for line in result.stderr.splitlines()), result.stderr[-2000:]
    assert "measuring" not in result.stdout


def test_tables_are_aligned(bench_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    lines = bench_run[0].stdout.splitlines()
    underlines = [i for i, line in enumerate(lines) if line.startswith("-----")]
    assert len(underlines) == 2, bench_run[0].stdout  # the results table and the ratio table
    for at in underlines:
        starts = columns(lines[at])
        table = lines[at - 1 : lines.index("", at) if "" in lines[at:] else len(lines)]
        assert len(table) > 2
        for line in table:  # every cell starts or ends on its column's edges: text between the gaps
            assert all(i == 0 or line[i - 1] == " " for i in starts[1:]), f"{line!r} vs {lines[at]!r}"
    anchors = {line.split()[1] for line in lines[underlines[0] + 1 :] if line.startswith("demo ")}
    assert {"floor", "ours", "null-host", "naive", "pytriton"} <= anchors


def test_the_native_backend_is_skipped_in_one_line_where_the_host_has_none(
    bench_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    if native_backend_folder(None) is not None:
        pytest.skip(f"this host has the native onnxruntime backend ({NGC_NATIVE_BACKEND}): it is measured")
    result, work = bench_run
    said = [line for line in result.stderr.splitlines() if "native onnxruntime backend" in line]
    assert len(said) == 1 and said[0].startswith("demo: native onnxruntime backend: skipped"), said
    assert "--native-backend DIR" in said[0] and str(NGC_NATIVE_BACKEND) in said[0]
    report = json.loads((work / "results" / "bench.json").read_text())
    assert "native" not in {m["anchor"] for m in report["results"]}


def test_no_files_are_left_behind(bench_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    _, work = bench_run
    left = sorted(p.name for p in (work / "tmp").iterdir() if p.name not in ORT_OWN)
    assert left == [], f"left in TMPDIR: {left}"
    workspaces = work / "cache" / "pytriton"
    assert not workspaces.exists() or not any(workspaces.iterdir()), list(workspaces.iterdir())


def test_plot_ticks_at_the_measured_concurrencies_and_names_the_host(
    bench_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    report = json.loads((bench_run[1] / "results" / "bench.json").read_text())
    figure = draw(report)
    for axes in figure.axes[:2]:
        assert [round(t) for t in axes.get_xticks()] == CONCURRENCIES
        assert [t.get_text() for t in axes.get_xticklabels()] == [str(c) for c in CONCURRENCIES]
    title, env = figure.get_suptitle(), report["environment"]
    # The title names the device the figures are from: the GPU on a GPU host (its name as torch gives it,
    # the CPU's then left to the JSON), the CPU and its cores elsewhere.
    if torch.cuda.is_available():
        assert env["gpu"] == torch.cuda.get_device_name(0)
        assert title.startswith(f"{env['gpu']}, {env['date']}, ") and env["cpu"] not in title
    else:
        assert "gpu" not in env
        assert title.startswith(f"{env['cpu']}, {env['cores']} cores, {env['date']}, ")
    assert title.endswith(f"onnxruntime {env['onnxruntime']}")
    # the CPU is recorded on both kinds of host, by its name rather than platform.processor()'s "x86_64"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists() and "model name" in cpuinfo.read_text():
        assert env["cpu"] != "x86_64" and env["cpu"] in cpuinfo.read_text()
