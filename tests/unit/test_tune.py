"""triton-ort tune's search without a server: candidates written into configs, one lever at a time from the
best so far, a latency budget, and the time bound (the measurements are faked; tests/integration/test_tune.py
runs the real ones)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tests.support.paths import demo_onnx
from triton_ort.cli import perf_analyzer, tune
from triton_ort.cli.request_checks import RequestError
from triton_ort.harness.repository import write_config


def _point(rate: float, latency_ms: float, concurrency: int = 8) -> perf_analyzer.Point:
    return perf_analyzer.Point(
        "m", concurrency, 1, 10, rate, latency_ms * 1e3, latency_ms * 1e3, latency_ms * 1e3,
        latency_ms * 1e3, latency_ms * 1e3, latency_us=latency_ms * 1e3,
    )  # fmt: skip


def test_a_candidate_sets_its_levers_and_nothing_else() -> None:
    config = model_config_pb2.ModelConfig(name="m", max_batch_size=8)
    config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_GPU, count=1)
    tuned = tune.Candidate(4, 100, cuda_graphs=False, output_placement="host").apply(config)
    assert (
        tuned.instance_group[0].count == 4 and tuned.instance_group[0].kind == config.instance_group[0].kind
    )
    assert tuned.dynamic_batching.max_queue_delay_microseconds == 100
    assert (
        tuned.optimization.cuda.graphs is False
        and tuned.parameters["output_placement"].string_value == "host"
    )
    assert config.instance_group[0].count == 1  # the original is left as it was
    unbatched = tune.Candidate(2, 500).apply(model_config_pb2.ModelConfig(name="m"))
    assert not unbatched.HasField("dynamic_batching") and unbatched.instance_group[0].count == 2


def test_graphs_are_set_where_the_config_sets_them_the_parameter_or_the_optimization_field() -> None:
    # the benchmark's configs (scripts/build_models.py) turn graphs on by the parameter cuda_graph; a
    # candidate that also wrote optimization.cuda.graphs was refused at load ("set the same option")
    config = model_config_pb2.ModelConfig(name="m", max_batch_size=8)
    config.parameters["cuda_graph"].string_value = "true"
    assert tune.graphs_in(config) is True
    tuned = tune.Candidate(1, 0, cuda_graphs=False).apply(config)
    assert tuned.parameters["cuda_graph"].string_value == "false" and not tuned.HasField("optimization")
    assert tune.graphs_in(tuned) is False
    plain = model_config_pb2.ModelConfig(name="m", max_batch_size=8)
    plain.optimization.cuda.graphs = True
    assert tune.graphs_in(plain) is True
    assert "cuda_graph" not in tune.Candidate(1, 0, cuda_graphs=False).apply(plain).parameters
    plain.parameters["cuda_graph"].string_value = "sometimes"
    with pytest.raises(RequestError, match=r"config\.pbtxt: parameter cuda_graph: 'sometimes' is not"):
        tune.graphs_in(plain)


def test_the_winner_is_the_fastest_within_the_budget() -> None:
    fast_slow = tune.Result(tune.Candidate(4, 0), [_point(900.0, 30.0)])
    steady = tune.Result(tune.Candidate(1, 0), [_point(500.0, 5.0)])
    broken = tune.Result(tune.Candidate(2, 0), error="did not load: ...")
    assert tune.winner([fast_slow, steady, broken], None) is fast_slow
    assert tune.winner([fast_slow, steady, broken], 10.0) is steady
    assert tune.winner([fast_slow, broken], 10.0) is None


def _args(**overrides: Any) -> argparse.Namespace:
    values = {
        "instances": [1, 2, 4],
        "queue_delays": [0, 100, 500],
        "latency_budget_ms": None,
        "max_minutes": 60.0,
    }
    return argparse.Namespace(**{**values, **overrides})


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    config = model_config_pb2.ModelConfig(name="m", max_batch_size=8)
    config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU, count=1)
    write_config(tmp_path / "m", config)
    return tmp_path / "m"


def test_instances_and_queue_delays_are_tried_in_every_pair(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One instance is best without a delay, but four with 100 µs are best of all: the pair that moving
    one lever at a time from the best (1 instance, then its delays) never tried (the demo, Model
    Analyzer's winner, 2026-12-06)."""
    rates = {(1, 0): 300.0, (2, 0): 250.0, (4, 0): 200.0, (4, 100): 400.0}
    tried: list[tune.Candidate] = []

    def measure(folder: Path, config: Any, candidate: tune.Candidate, args: Any) -> tuple[tune.Result, int]:
        tried.append(candidate)
        rate = rates.get((candidate.instances, candidate.queue_delay_us), 100.0)
        return tune.Result(candidate, [_point(rate, 1.0)]), 0

    monkeypatch.setattr(tune, "measure", measure)
    results = tune.search(model_dir, _args(), report=lambda line: None)
    pairs = [(c.instances, c.queue_delay_us) for c in tried]
    assert sorted(pairs) == [(i, d) for i in (1, 2, 4) for d in (0, 100, 500)]
    best = tune.winner(results, None)
    assert best is not None and best.candidate == tune.Candidate(4, 100)


def test_the_gpu_levers_go_one_at_a_time_from_the_best_pair() -> None:
    stages = tune.stages(_args(), gpu=True)
    assert stages[0][0] == ("instances", "queue_delay_us") and len(stages[0][1]) == 9
    assert [fields for fields, _ in stages[1:3]] == [("cuda_graphs",), ("output_placement",)]


def test_no_candidate_starts_after_the_time_bound(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []

    def measure(folder: Path, config: Any, candidate: tune.Candidate, args: Any) -> tuple[tune.Result, int]:
        return tune.Result(candidate, [_point(1.0, 1.0)]), 0

    monkeypatch.setattr(tune, "measure", measure)
    times = iter([0.0, 0.0, *[1e9] * 9])
    monkeypatch.setattr("triton_ort.cli.tune.time.monotonic", lambda: next(times))
    results = tune.search(model_dir, _args(max_minutes=1.0), report=said.append)
    assert len(results) == 1 and said[-1] == "tune: --max-minutes 1 reached; 8 candidate(s) not tried"


def test_levers_not_named_are_not_moved() -> None:
    args = _args(levers=["instances", "cuda-graphs"])
    assert [fields for fields, _ in tune.stages(args, gpu=True)] == [("instances",), ("cuda_graphs",)]
    assert [fields for fields, _ in tune.stages(args, gpu=False)] == [("instances",)]


def test_tune_measures_as_perf_does_with_perfs_own_options(tmp_path: Path) -> None:
    """tune takes perf's measurement options (one definition, perf_analyzer.add_measurement_options),
    system shared memory included, and refuses the same contradictions."""
    parser = tune.build_parser("triton-ort tune")
    args = parser.parse_args([str(tmp_path), "--shared-memory", "system", "-i", "grpc", "--percentile", "95"])
    perf_analyzer.resolve_shared_memory(parser, args)
    assert (args.shared_memory, args.protocol, args.percentile) == ("system", "grpc", 95.0)
    assert (args.measurement_interval, args.max_windows) == (1000.0, 6)  # tune's shorter windows
    server = argparse.Namespace(grpc_url="127.0.0.1:1", http_url="127.0.0.1:2", metrics_port=3)
    assert tune._perf_args(args, server).shared_memory == "system"  # type: ignore[arg-type]
    args = parser.parse_args([str(tmp_path), "--cuda-shm", "--shared-memory", "system"])
    with pytest.raises(SystemExit):
        perf_analyzer.resolve_shared_memory(parser, args)


def test_tune_takes_perfs_input_options_and_needs_perf_analyzer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--shape, --input-data and --range come from perf's one definition; without perf_analyzer tune stops
    in one line with the fix, before any server starts."""
    (tmp_path / "config.pbtxt").write_text('backend: "onnxruntime_zerocopy"\n')
    parser = tune.build_parser("triton-ort tune")
    args = parser.parse_args([str(tmp_path), "--shape", "x:4", "--input-data", "d.json", "--range", "x=0:3"])
    assert (args.shape, args.input_data, args.range) == (["x:4"], "d.json", ["x=0:3"])
    monkeypatch.setattr(
        tune, "find_perf_analyzer", lambda: (None, "perf_analyzer: none. Fix: make perf-analyzer")
    )
    monkeypatch.setattr(tune, "search", lambda *a, **k: pytest.fail("a candidate was started"))
    with pytest.raises(SystemExit) as stopped:
        tune.main([str(tmp_path)])
    assert stopped.value.code == 1 and "Fix: make perf-analyzer" in capsys.readouterr().err


def test_the_three_line_config_gets_the_winning_queue_delay(tmp_path: Path) -> None:
    """A config without max_batch_size (the README's three lines) is completed by the server to batch: the
    winner's delay is written, as its header says (it was left out, dynamic_batching {} served)."""
    model_dir = tmp_path / "demo"
    (model_dir / "1").mkdir(parents=True)
    shutil.copy(demo_onnx(), model_dir / "1" / "model.onnx")
    (model_dir / "config.pbtxt").write_text(
        'backend: "onnxruntime_zerocopy"\n'
        'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value { string_value: "no" } }\n'
    )
    written = tune.write_winner(model_dir, tune.Candidate(1, 500), replace_config=False)
    tuned = text_format.Parse(written.read_text(), model_config_pb2.ModelConfig())
    assert tuned.max_batch_size > 0 and tuned.dynamic_batching.max_queue_delay_microseconds == 500


def test_a_range_naming_no_input_is_refused_before_any_server_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As infer and perf refuse it: a misspelled --range had been ignored by tune, every candidate measured
    with the input's default values."""
    from tests.support import graphs

    graphs.overridable(tmp_path / "m" / "1" / "model.onnx")
    (tmp_path / "m" / "config.pbtxt").write_text('backend: "onnxruntime_zerocopy"\nmax_batch_size: 8\n')

    def measure(*_: Any) -> Any:
        raise AssertionError("a candidate was measured")

    monkeypatch.setattr(tune, "measure", measure)
    with pytest.raises(RequestError, match=r"--range sclae=\.\.\.: the model has no input 'sclae'; one of x"):
        tune.search(tmp_path / "m", _args(range=["sclae=0:3"]), report=lambda line: None)
