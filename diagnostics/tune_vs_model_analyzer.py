"""`triton-ort tune` beside Triton's Model Analyzer on one model and one grid: instances 1, 2, 4 and the
dynamic batcher's max_queue_delay 0, 100, 500 µs (tune's grid), one batch size, one concurrency, gRPC.

Model Analyzer measures all nine points (its manual search, local launch mode through
`triton-ort-tritonserver`); tune searches one lever at a time. Each tool's winner is then looked up in Model
Analyzer's table, so the two choices are compared on one set of measurements, and in tune's own.

    make perf-analyzer test-model-analyzer     # once: perf_analyzer and Model Analyzer's venv
    python -m diagnostics.tune_vs_model_analyzer --json docs/bench/tune-vs-model-analyzer-cpu-DATE.json
"""

from __future__ import annotations

import argparse
import csv
import json
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


def _levers(config_path: Path) -> tuple[int, int]:
    config = text_format.Parse(config_path.read_text(), model_config_pb2.ModelConfig())
    return config.instance_group[0].count, config.dynamic_batching.max_queue_delay_microseconds


def model_analyzer(
    model_analyzer_bin: Path, repository: Path, work: Path, batch: int, concurrency: int
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


def tune(model_dir: Path, work: Path, batch: int, concurrency: int) -> dict[str, Any]:
    report = work / "tune.json"
    started = time.monotonic()
    result = subprocess.run(
        [
            *(str(Path(sys.executable).parent / "triton-ort"), "tune", str(model_dir)),
            *("--levers", "instances", "queue-delay", "-b", str(batch), "--concurrency", str(concurrency)),
            *("-i", "grpc", "--json", str(report)),
        ],
        capture_output=True,
        text=True,
    )
    took = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"tune failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    candidates = json.loads(report.read_text())
    winner = max((c for c in candidates if c["error"] is None), key=lambda c: c["score_infer_per_s"])
    return {
        "took_s": round(took),
        "winner": winner["candidate"],
        "points": {c["candidate"]: c["score_infer_per_s"] for c in candidates},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model-analyzer", type=Path, default=ROOT / ".venv-model-analyzer/bin/model-analyzer"
    )
    parser.add_argument("-b", "--batch", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
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
        analyzed = model_analyzer(args.model_analyzer, repository, work, args.batch, args.concurrency)
        tuned = tune(repository / "demo", work, args.batch, args.concurrency)
    by_ma = analyzed["points"]
    ma_winner = max(by_ma, key=lambda label: by_ma[label]["infer_per_s"])
    tune_winner_in_ma = by_ma[tuned["winner"]]["infer_per_s"] / by_ma[ma_winner]["infer_per_s"]
    summary: dict[str, Any] = {
        "model_analyzer_winner": ma_winner,
        "tune_winner": tuned["winner"],
        "tune_winner_over_ma_winner_in_ma_table": round(tune_winner_in_ma, 3),
    }
    if ma_winner in tuned["points"]:
        summary["tune_winner_over_ma_winner_in_tune_table"] = round(
            tuned["points"][tuned["winner"]] / tuned["points"][ma_winner], 3
        )
    print(json.dumps({"model_analyzer": analyzed, "tune": tuned, "summary": summary}, indent=2))
    if args.json:
        write_report(
            args.json,
            {
                "host": host_environment(),
                "grid": {"instances": INSTANCES, "max_queue_delay_us": DELAYS_US},
                "batch": args.batch,
                "concurrency": args.concurrency,
                "model_analyzer": analyzed,
                "tune": tuned,
                "summary": summary,
            },
        )


if __name__ == "__main__":
    main()
