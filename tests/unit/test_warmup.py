"""The `warmup` parameter: its format, its check against max_batch_size, and the runs it makes at load."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support import graphs
from triton_ort import ConfigError, ModelInstance, parse_options
from triton_ort.model.load_checks import check_warmup_batch_sizes


@pytest.mark.parametrize(
    ("raw", "sizes"),
    [
        ("true", (1,)),
        ("False", ()),
        ("1", (1,)),
        ("1,8,64", (1, 8, 64)),
        (" 8, 1 ,8 ", (8, 1)),
        # the boolean words configs used when warm-up was only on or off
        ("on", (1,)),
        ("Yes", (1,)),
        ("off", ()),
        ("no", ()),
        ("0", ()),
    ],
)
def test_warmup_values(raw: str, sizes: tuple[int, ...]) -> None:
    assert parse_options({"warmup": raw}).warmup == sizes


def test_warmup_is_on_at_batch_size_one_by_default() -> None:
    assert parse_options({}).warmup == (1,)


@pytest.mark.parametrize("raw", ["sometimes", "enabled", "", "1;8", "8 16", "1.5", "one"])
def test_garbage_names_key_value_and_the_format(raw: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_options({"warmup": raw})
    assert str(caught.value) == (
        f"parameter 'warmup': {raw!r} is not valid; "
        "expected true/false (1/0, on/off, yes/no), or batch sizes separated by commas, such as 1,8,64"
    )


@pytest.mark.parametrize("raw", ["8,0", "8,-1", "-1"])
def test_batch_sizes_below_one_are_refused(raw: str) -> None:
    with pytest.raises(ConfigError, match=rf"parameter 'warmup': '{raw}' has a batch size below 1"):
        parse_options({"warmup": raw})


def test_batch_sizes_must_fit_the_model() -> None:
    check_warmup_batch_sizes((1, 8), 8)
    check_warmup_batch_sizes((1,), 0)
    check_warmup_batch_sizes((), 0)
    with pytest.raises(ConfigError, match="batch size 16 is above max_batch_size 8"):
        check_warmup_batch_sizes((1, 16), 8)
    with pytest.raises(ConfigError, match="batch sizes 1,4 need a batch axis, but max_batch_size is 0"):
        check_warmup_batch_sizes((1, 4), 0)


def multi_io_config(warmup: str, max_batch_size: int = 8) -> dict[str, Any]:
    def entry(name: str, data_type: str, dims: list[int]) -> dict[str, Any]:
        return {"name": name, "data_type": data_type, "dims": dims}

    return {
        "max_batch_size": max_batch_size,
        "input": [entry("a", "TYPE_FP16", [3]), entry("b", "TYPE_INT64", [4]), entry("c", "TYPE_BOOL", [2])],
        "output": [entry("a_twice", "TYPE_FP16", [3])],
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
        "parameters": {"warmup": {"string_value": warmup}},
    }


def test_instance_runs_each_batch_size_at_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    graphs.multi_io(tmp_path / "model.onnx")
    with caplog.at_level(logging.INFO, logger="triton_ort"):
        ModelInstance(multi_io_config("2,8"), tmp_path, instance_kind="CPU", device_id=0)
    runs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("warm-up run")]
    assert [message.split(" took ")[0] for message in runs] == [
        "warm-up run at batch size 2",
        "warm-up run at batch size 8",
    ]
    assert caplog.records[-1].getMessage().startswith("loaded model.onnx")  # ready after warm-up


def test_instance_without_warmup_runs_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    graphs.multi_io(tmp_path / "model.onnx")
    with caplog.at_level(logging.INFO, logger="triton_ort"):
        ModelInstance(multi_io_config("false"), tmp_path, instance_kind="CPU", device_id=0)
    assert not [r for r in caplog.records if "warm-up" in r.getMessage()]


def test_instance_refuses_warmup_above_max_batch_size(tmp_path: Path) -> None:
    graphs.multi_io(tmp_path / "model.onnx")
    with pytest.raises(ConfigError, match="batch size 64 is above max_batch_size 8"):
        ModelInstance(multi_io_config("1,64"), tmp_path, instance_kind="CPU", device_id=0)


def test_cpu_instances_take_every_cpu_and_do_not_spin(tmp_path: Path) -> None:
    """docs/benchmarks.md (CPU): a thread per CPU for each instance, no spinning, unless the config says
    otherwise."""
    graphs.multi_io(tmp_path / "model.onnx")
    quiet = ModelInstance(multi_io_config("false"), tmp_path, instance_kind="CPU", device_id=0)
    cpus = len(os.sched_getaffinity(0))
    assert (quiet.options.intra_op_num_threads, quiet.options.allow_spinning) == (cpus, False)
    spinning = {"session.intra_op.allow_spinning": {"string_value": "1"}}
    config = multi_io_config("false")
    config["parameters"] = {**config.get("parameters", {}), **spinning}
    assert ModelInstance(config, tmp_path, instance_kind="CPU", device_id=0).options.allow_spinning is True
