"""`triton-ort tune` beside Triton's Model Analyzer on one model and one grid: instances 1, 2, 4 and the
dynamic batcher's max_queue_delay 0, 100, 500 µs (tune's grid), one batch size, one concurrency, gRPC.

Model Analyzer measures all nine points (its manual search, local launch mode through
`triton-ort-tritonserver`), then tune searches. The two winners are then measured again head to head,
alternated over --rounds (a candidate's server each time, perf_analyzer's figures), which judges the two
choices in one run: on a shared machine two measurements of one config minutes apart differ by more than
the candidates do.

    make perf-analyzer test-model-analyzer     # once: perf_analyzer and Model Analyzer's venv
    python -m diagnostics.tune_vs_model_analyzer --json docs/bench/tune-vs-model-analyzer-cpu-DATE.json
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from client.bench_common import ROOT, host_environment, write_report
from triton_ort.cli.perf_analyzer import find_perf_analyzer
from triton_ort.harness.server import free_ports

INSTANCES = (1, 2, 4)
DELAYS_US = (0, 100, 500)
LABEL = re.compile(r"(\d+) inst, delay (\d+) us")  # tune's label of a candidate of this grid


def _levers(config_path: Path) -> tuple[int, int]:
    config = text_format.Parse(config_path.read_text(), model_config_pb2.ModelConfig())
    return config.instance_group[0].count, config.dynamic_batching.max_queue_delay_microseconds


def model_analyzer(
    model_analyzer_bin: Path, repository: Path, work: Path, batch: int, concurrency: int, interval_ms: int
) -> dict[str, Any]:
    http, grpc, metrics = free_ports(3)
    config = work / "model-analyzer.yaml"
    config.write_text(
        f"""model_repository: {repository}
triton_launch_mode: local
triton_server_path: {Path(sys.executable).parent / "triton-ort-tritonserver"}
perf_analyzer_path: {find_perf_analyzer()[0]}
output_model_repository_path: {work / "output"}
override_output_model_repository: true
export_path: {work / "export"}
checkpoint_directory: {work / "checkpoints"}
client_protocol: grpc
triton_http_endpoint: localhost:{http}
triton_grpc_endpoint: localhost:{grpc}
triton_metrics_url: http://localhost:{metrics}/metrics
run_config_search_disable: true
perf_analyzer_flags:
  measurement-interval: {interval_ms}
profile_models:
  demo:
    model_config_parameters:
      instance_group:
        - kind: KIND_CPU
          count: {list(INSTANCES)}
      dynamic_batching:
        max_queue_delay_microseconds: {list(DELAYS_US)}
    parameters:
      batch_sizes: {batch}
      concurrency: {concurrency}
"""
    )
    started = time.monotonic()
    result = subprocess.run(
        [str(model_analyzer_bin), "profile", "-f", str(config)], capture_output=True, text=True, cwd=work
    )
    took = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"model-analyzer failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    with open(work / "export" / "results" / "metrics-model-inference.csv") as table:
        rows = list(csv.DictReader(table))
    points = {}
    for row in rows:
        name = row["Model Config Path"]
        if name.endswith("_config_default"):
            continue  # the shipped config, a point of the grid measured again
        instances, delay = _levers(work / "output" / name / "config.pbtxt")
        p99_ms = row.get("p99 Latency (ms)")
        points[f"{instances} inst, delay {delay} us"] = {
            "config": name,
            "infer_per_s": float(row["Throughput (infer/sec)"]),
            "p99_us": float(p99_ms) * 1000 if p99_ms else None,
        }
    return {"took_s": round(took), "points": points}


def _tune(model_dir: Path, report: Path, batch: int, concurrency: int, interval_ms: int, *levers: str) -> Any:
    result = subprocess.run(
        [
            *(str(Path(sys.executable).parent / "triton-ort"), "tune", str(model_dir)),
            *("--levers", "instances", "queue-delay", "-b", str(batch), "--concurrency", str(concurrency)),
            *("-i", "grpc", "-p", str(interval_ms), "--json", str(report), *levers),
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SystemExit(f"tune failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return json.loads(report.read_text())


def tune(model_dir: Path, work: Path, batch: int, concurrency: int, interval_ms: int) -> dict[str, Any]:
    started = time.monotonic()
    candidates = _tune(model_dir, work / "tune.json", batch, concurrency, interval_ms)
    took = time.monotonic() - started
    winner = max((c for c in candidates if c["error"] is None), key=lambda c: c["score_infer_per_s"])
    return {
        "took_s": round(took),
        "winner": winner["candidate"],
        "points": {c["candidate"]: c["score_infer_per_s"] for c in candidates},
    }


def head_to_head(
    model_dir: Path, work: Path, labels: list[str], args: argparse.Namespace
) -> dict[str, list[float]]:
    """The two winners measured again, alternated round by round (one candidate per tune call: its
    server, perf_analyzer), so that a busy spell of the machine hits both alike."""
    rates: dict[str, list[float]] = {label: [] for label in labels}
    for _ in range(args.rounds):
        for label in labels:
            instances, delay = LABEL.fullmatch(label).groups()  # type: ignore[union-attr]
            levers = ("--instances", instances, "--queue-delays", delay)
            (only,) = _tune(
                model_dir, work / "one.json", args.batch, args.concurrency, args.interval, *levers
            )
            rates[label].append(only["score_infer_per_s"])
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model-analyzer", type=Path, default=ROOT / ".venv-model-analyzer/bin/model-analyzer"
    )
    parser.add_argument("-b", "--batch", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "-p", "--interval", type=int, default=2000, help="measurement window, ms (both tools)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the two winners head to head")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if find_perf_analyzer()[0] is None or not args.model_analyzer.is_file():
        raise SystemExit("needs perf_analyzer and Model Analyzer: make perf-analyzer test-model-analyzer")
    with tempfile.TemporaryDirectory(prefix="tune-vs-ma-") as scratch:
        work = Path(scratch)
        repository = work / "repository"
        shutil.copytree(
            ROOT / "model_repository" / "demo",
            repository / "demo",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        ma = model_analyzer(
            args.model_analyzer, repository, work, args.batch, args.concurrency, args.interval
        )
        tuned = tune(repository / "demo", work, args.batch, args.concurrency, args.interval)
        by_ma = ma["points"]
        ma_winner = max(by_ma, key=lambda label: by_ma[label]["infer_per_s"])
        winners = [ma_winner] if tuned["winner"] == ma_winner else [ma_winner, tuned["winner"]]
        rates = head_to_head(repository / "demo", work, winners, args)
    mean = {label: sum(values) / len(values) for label, values in rates.items()}
    summary: dict[str, Any] = {
        "model_analyzer_winner": ma_winner,
        "tune_winner": tuned["winner"],
        "tune_winner_over_ma_winner_in_ma_table": round(
            by_ma[tuned["winner"]]["infer_per_s"] / by_ma[ma_winner]["infer_per_s"], 3
        ),
        "head_to_head_infer_per_s": rates,
        "tune_winner_over_ma_winner_head_to_head": round(mean[tuned["winner"]] / mean[ma_winner], 3),
    }
    report = {
        "host": host_environment(),
        "grid": {"instances": INSTANCES, "max_queue_delay_us": DELAYS_US},
        "batch": args.batch,
        "concurrency": args.concurrency,
        "measurement_interval_ms": args.interval,
        "model_analyzer": ma,
        "tune": tuned,
        "summary": summary,
    }
    print(json.dumps(report["summary"], indent=2))
    if args.json:
        write_report(args.json, report)


if __name__ == "__main__":
    main()
