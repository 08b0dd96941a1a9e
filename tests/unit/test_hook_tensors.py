"""What a hooks module declares about its clients' tensors (INPUTS, OUTPUTS): read, completed into the
config as the server's auto-complete and `triton-ort config` complete it, refused where missing, and
optional inputs through the hooks in-process."""

from __future__ import annotations

import textwrap
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.support.hooks_support import DECLARED_HOOKS, SHORT_CONFIG, UNDECLARED_HOOKS
from tests.support.paths import demo_onnx
from triton_ort import ClientTensor, ConfigError, ModelInstance
from triton_ort.cli.config import ConfigCommandError, completed_config
from triton_ort.model.autocomplete import complete_config
from triton_ort.model.dtypes import from_triton_type
from triton_ort.model.hooks_file import read_declarations
from triton_ort.model.signature import TensorSpec


def _module(**attributes: Any) -> types.ModuleType:
    module = types.ModuleType("hooks")
    for name, value in attributes.items():
        setattr(module, name, value)
    return module


def _spec(name: str, data_type: str, *shape: int | None) -> TensorSpec:
    return TensorSpec(name, from_triton_type(data_type, name), tuple(shape))


def test_declarations_read_as_tensor_specs() -> None:
    declared = read_declarations(
        _module(
            INPUTS={"raw": ("UINT8", [-1, 2010]), "t": ClientTensor("TYPE_FP32", [-1, 1], optional=True)},
            OUTPUTS={"scores": ("FP32", (-1, 2))},
        ),
        Path("hooks.py"),
    )
    assert declared is not None
    assert declared.inputs == (_spec("raw", "UINT8", None, 2010),)
    assert declared.optional == (_spec("t", "FP32", None, 1),)
    assert declared.outputs == (_spec("scores", "FP32", None, 2),)


def test_a_module_without_declarations_declares_nothing() -> None:
    assert read_declarations(_module(), Path("hooks.py")) is None


@pytest.mark.parametrize(
    ("attributes", "says"),
    [
        ({"INPUTS": {"raw": ("UINT8", [-1])}}, "declares INPUTS but not OUTPUTS"),
        ({"INPUTS": {"raw": ("UINT7", [-1])}, "OUTPUTS": {"y": ("FP32", [-1])}}, "data_type 'UINT7'"),
        ({"INPUTS": {"raw": ("UINT8", [-1, 0])}, "OUTPUTS": {"y": ("FP32", [-1])}}, "positive ints or -1"),
        ({"INPUTS": {"raw": "UINT8"}, "OUTPUTS": {"y": ("FP32", [-1])}}, "must be (data type, shape)"),
        ({"INPUTS": {}, "OUTPUTS": {"y": ("FP32", [-1])}}, "INPUTS must be a non-empty dict"),
        (
            {"INPUTS": {"x": ("FP32", [-1])}, "OUTPUTS": {"y": ClientTensor("FP32", [-1], optional=True)}},
            "only inputs may be",
        ),
    ],
)
def test_a_declaration_that_cannot_be_read_names_the_module_and_the_tensor(
    attributes: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigError, match=r"hooks module hooks\.py") as caught:
        read_declarations(_module(**attributes), Path("hooks.py"))
    assert says in str(caught.value)


def _folder(tmp_path: Path, hooks: str, config: str = SHORT_CONFIG) -> Path:
    folder = tmp_path / "hooked"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_bytes(demo_onnx().read_bytes())
    (folder / "1" / "hooks.py").write_text(textwrap.dedent(hooks))
    (folder / "config.pbtxt").write_text(config)
    return folder


def _as_config(text: str) -> dict[str, Any]:
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    parsed = text_format.Parse(text, model_config_pb2.ModelConfig())
    as_dict: dict[str, Any] = json_format.MessageToDict(parsed, preserving_proto_field_name=True)
    as_dict.setdefault("max_batch_size", 0)
    return as_dict


def test_the_short_config_is_completed_from_the_declarations(tmp_path: Path) -> None:
    folder = _folder(tmp_path, DECLARED_HOOKS)
    completed = complete_config(_as_config(SHORT_CONFIG), folder / "1")
    assert completed.max_batch_size == 8 and completed.dynamic_batching
    assert completed.inputs == (
        {"name": "raw", "data_type": "TYPE_UINT8", "dims": [2010]},
        {"name": "temperature", "data_type": "TYPE_FP32", "dims": [1], "optional": True},
    )
    assert completed.outputs == ({"name": "probabilities", "data_type": "TYPE_FP32", "dims": [2]},)
    # without max_batch_size, batching follows the declared first axes as a plain model's follows the file's
    unbatched = SHORT_CONFIG.replace("max_batch_size: 8\n", "")
    assert complete_config(_as_config(unbatched), folder / "1").max_batch_size == 4
    offline, _ = completed_config(folder)
    assert [t.name for t in offline.input] == ["raw", "temperature"] and offline.input[1].optional
    assert offline.HasField("dynamic_batching")


def test_without_declarations_or_config_tensors_the_config_and_the_load_are_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path, UNDECLARED_HOOKS)
    line = f"hooks module {folder / '1' / 'hooks.py'} declares no client tensors"
    with pytest.raises(ConfigError, match="declares no client tensors") as caught:
        complete_config(_as_config(SHORT_CONFIG), folder / "1")
    assert str(caught.value).startswith(line) and "\n" not in str(caught.value)
    assert "INPUTS = {'raw': ('UINT8', [-1, 2010])}" in str(caught.value)
    with pytest.raises(ConfigCommandError, match="declares no client tensors"):
        completed_config(folder)
    # the load, as the stub's initialize() gets the config that auto-complete could not complete
    with pytest.raises(ConfigError) as loading:
        ModelInstance(_as_config(SHORT_CONFIG), folder / "1", "CPU", 0)
    assert str(loading.value).startswith(line)


def test_a_declared_fixed_first_axis_with_max_batch_size_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path, DECLARED_HOOKS.replace("[-1, 2010]", "[2010]"))
    with pytest.raises(ConfigCommandError, match=r"declares \['raw'\] without an open first axis"):
        completed_config(folder)


def test_an_optional_input_may_be_left_out_and_preprocess_gets_what_was_sent(tmp_path: Path) -> None:
    folder = _folder(tmp_path, DECLARED_HOOKS)
    from google.protobuf import json_format

    completed, _ = completed_config(folder)
    config = json_format.MessageToDict(completed, preserving_proto_field_name=True)
    instance = ModelInstance(config, folder / "1", "CPU", 0)
    hooks = instance.plan.hooks
    assert hooks is not None
    seen = hooks.preprocess.__globals__["SEEN"]  # type: ignore[union-attr]
    seen.clear()
    raw = torch.from_numpy(np.random.default_rng(0).integers(0, 250, (3, 2010), dtype=np.uint8))
    hot = torch.full((3, 1), 0.5)
    plain, tempered = instance.infer([{"raw": raw}, {"raw": raw, "temperature": hot}])
    assert not isinstance(plain, Exception) and not isinstance(tempered, Exception), (plain, tempered)
    assert sorted(map(tuple, seen)) == [("raw",), ("raw", "temperature")]
    logits = torch.log(plain["probabilities"])
    torch.testing.assert_close(tempered["probabilities"], torch.softmax(logits / 0.5, dim=1))
    instance.close()


def test_a_config_with_inputs_but_no_outputs_and_no_declarations_names_what_is_missing(
    tmp_path: Path,
) -> None:
    folder = _folder(tmp_path, UNDECLARED_HOOKS)
    config = _as_config(SHORT_CONFIG + 'input [ { name: "raw", data_type: TYPE_UINT8, dims: [ 2010 ] } ]\n')
    with pytest.raises(ConfigError, match=r"declares no client tensors and config\.pbtxt lists no outputs,"):
        ModelInstance(config, folder / "1", "CPU", 0)
