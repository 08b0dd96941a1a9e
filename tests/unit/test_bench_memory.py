"""diagnostics.bench_memory's CPU stages on this host: each in a fresh process, torch imported only where
the stage says so (the figure that separates what torch costs a CPU stub from what the model costs)."""

from __future__ import annotations

from pathlib import Path

from diagnostics.bench_memory import measure
from tests.support.paths import MODEL_REPOSITORY


def test_the_cpu_stages_separate_torch_from_the_model() -> None:
    stages = ("cpu_ort", "cpu_torch", "cpu_instance")
    rows = {stage: measure(stage, "demo", MODEL_REPOSITORY) for stage in stages}
    assert all("error" not in row for row in rows.values()), rows
    assert rows["cpu_ort"]["torch_imported"] is False, rows["cpu_ort"]
    assert rows["cpu_torch"]["torch_imported"] is True, rows["cpu_torch"]
    assert rows["cpu_instance"]["torch_imported"] is False, rows["cpu_instance"]  # as a CPU stub holds it
    assert 0 < rows["cpu_ort"]["uss_mib"] <= rows["cpu_ort"]["rss_mib"]
    assert rows["cpu_torch"]["uss_mib"] > rows["cpu_ort"]["uss_mib"]


def test_the_small_models_repository_is_one_the_server_accepts(tmp_path: Path) -> None:
    from diagnostics.bench_memory import write_cpu_demo, write_small_models
    from triton_ort.harness.checks import check_repository
    from triton_ort.harness.repository import read_config

    names = write_small_models(tmp_path, 3)
    write_cpu_demo(tmp_path, MODEL_REPOSITORY)
    check_repository(tmp_path)  # raises on a missing file or an unreadable config
    assert names == ["small1", "small2", "small3"]
    for name in [*names, "demo"]:
        group = read_config(tmp_path / name).instance_group[0]
        assert (group.kind, group.count) == (group.KIND_CPU, 1), (name, group)


def test_graphs_are_turned_off_where_the_config_turns_them_on() -> None:
    """The instance_no_graphs stage sets graphs as tune does (tune.set_graphs): the benchmark's configs
    turn them on by the parameter cuda_graph, the shipped demo by optimization.cuda.graphs."""
    from tritonclient.grpc import model_config_pb2

    from triton_ort.cli.tune import set_graphs

    by_parameter = model_config_pb2.ModelConfig()
    by_parameter.parameters["cuda_graph"].string_value = "true"
    set_graphs(by_parameter, False)
    assert by_parameter.parameters["cuda_graph"].string_value == "false"
    assert not by_parameter.HasField("optimization")
    by_field = model_config_pb2.ModelConfig()
    by_field.optimization.cuda.graphs = True
    set_graphs(by_field, False)
    assert by_field.optimization.cuda.graphs is False and "cuda_graph" not in by_field.parameters
