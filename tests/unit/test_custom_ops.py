"""Custom operators: the op libraries of config.pbtxt's model_operations registered with ONNX Runtime, and
a node of a domain no one implements refused naming it, at load and offline alike."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from onnxruntime.capi import onnxruntime_pybind11_state

from tests.support import graphs
from triton_ort import ConfigError, ModelInstance
from triton_ort.model.autocomplete import complete_config
from triton_ort.model.custom_ops import ORT_DOMAINS, check_custom_operators, config_line
from triton_ort.model.served_config import ServedConfig
from triton_ort.runtime.distributions import ort_distributions

REFUSAL = (
    "node 'fancy' (op type 'MyFancyOp') is of domain 'com.example', which ONNX Runtime does not implement: "
    "register the custom-op library that does in config.pbtxt: "
    'model_operations { op_library_filename: "/path/to/libcustom_ops.so" }'
)


def _config(version_dir: Path, libraries: list[str] | None = None) -> dict[str, object]:
    completed = complete_config({"name": "custom", "max_batch_size": 8}, version_dir)
    config: dict[str, object] = {
        "name": "custom",
        "max_batch_size": 8,
        "input": list(completed.inputs),
        "output": list(completed.outputs),
    }
    if libraries is not None:
        config["model_operations"] = {"op_library_filename": libraries}
    return config


def test_the_domains_ort_implements_are_the_installed_ort_s() -> None:
    schemas = {schema.domain for schema in onnxruntime_pybind11_state.get_all_operator_schema()}
    assert schemas | {"ai.onnx"} == ORT_DOMAINS


def test_a_custom_domain_without_a_library_is_refused_naming_node_domain_and_config_line(
    tmp_path: Path,
) -> None:
    graphs.custom_op(tmp_path / "model.onnx")
    with pytest.raises(ConfigError) as offline:
        check_custom_operators(tmp_path / "model.onnx", ())
    assert str(offline.value) == REFUSAL
    with pytest.raises(ConfigError) as loaded:
        ModelInstance(_config(tmp_path), tmp_path, "CPU", 0)
    assert str(loaded.value) == REFUSAL  # the load's words are the offline check's
    assert config_line() in REFUSAL
    check_custom_operators(tmp_path / "model.onnx", ("/some/lib.so",))  # a library may implement it


def test_model_operations_is_read_into_the_served_config(tmp_path: Path) -> None:
    graphs.custom_op(tmp_path / "model.onnx")
    config = ServedConfig.parse(_config(tmp_path, ["/a/libone.so", "libtwo.so"]))
    assert config.op_libraries == ("/a/libone.so", "libtwo.so")


def test_a_library_that_cannot_be_loaded_fails_the_load_naming_the_file(tmp_path: Path) -> None:
    graphs.custom_op(tmp_path / "model.onnx")
    missing = str(tmp_path / "libmissing.so")
    with pytest.raises(ConfigError, match=r"op_library_filename '.*libmissing\.so' does not exist"):
        ModelInstance(_config(tmp_path, [missing]), tmp_path, "CPU", 0)
    not_a_library = tmp_path / "libbroken.so"
    not_a_library.write_text("not ELF")
    with pytest.raises(ConfigError, match=r"'.*libbroken\.so' could not be registered with ONNX Runtime: "):
        ModelInstance(_config(tmp_path, [str(not_a_library)]), tmp_path, "CPU", 0)


@pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime_extensions") is None,
    reason="onnxruntime-extensions is not installed (requirements-dev.txt)",
)
def test_a_registered_library_serves_its_operator_and_names_what_it_lacks(tmp_path: Path) -> None:
    import onnxruntime_extensions

    library = onnxruntime_extensions.get_library_path()
    assert "onnxruntime-extensions" not in ort_distributions()  # its module is not onnxruntime's
    graphs.contrib_negpos(tmp_path / "model.onnx")
    instance = ModelInstance(_config(tmp_path, [library]), tmp_path, "CPU", 0)
    try:
        x = np.array([[1.0, -2.0, 3.0, -4.0]], np.float32)
        (answer,) = instance.infer([{"x": torch.from_numpy(x)}])
        assert not isinstance(answer, Exception), answer
        np.testing.assert_array_equal(answer["neg"].numpy(), np.minimum(x, 0))
        np.testing.assert_array_equal(answer["pos"].numpy(), np.maximum(x, 0))
    finally:
        instance.close()
    # With the library, an operator it does not implement is named with it
    other = tmp_path / "other"
    graphs.custom_op(other / "model.onnx")
    with pytest.raises(ConfigError, match=r"node 'fancy' .* neither ONNX Runtime nor the libraries in"):
        ModelInstance(_config(other, [library]), other, "CPU", 0)
