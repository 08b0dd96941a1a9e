"""The models we write carry the IR version their opset needs, which the installed ORT reads."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from triton_ort.model.onnx_files import OPSET, ir_version_for, ort_max_ir_version, readable_model, save_model


def identity() -> onnx.GraphProto:
    v = helper.make_tensor_value_info
    return helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [v("x", TensorProto.FLOAT, ["batch", 2])],
        [v("y", TensorProto.FLOAT, ["batch", 2])],
    )


def test_the_opset_and_its_ir_version_pair_as_onnx_released_them() -> None:
    # VERSION_TABLE rows: (onnx release, IR version, ai.onnx opset, ai.onnx.ml opset, training opset)
    first_release = next(row for row in helper.VERSION_TABLE if row[2] >= OPSET)
    assert first_release[2] == OPSET
    assert ir_version_for(OPSET) == first_release[1]


def test_the_installed_ort_reads_the_ir_version_we_write() -> None:
    assert ir_version_for(OPSET) <= ort_max_ir_version()


def test_a_saved_model_has_the_pinned_ir_version_and_loads(tmp_path: Path) -> None:
    path = save_model(identity(), tmp_path / "model.onnx")
    model = onnx.load(str(path))
    assert model.ir_version == ir_version_for(OPSET) < onnx.IR_VERSION  # not onnx's default
    assert [(entry.domain, entry.version) for entry in model.opset_import] == [("", OPSET)]
    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_onnx_default_ir_version_is_restamped() -> None:
    model = helper.make_model(identity(), opset_imports=[helper.make_opsetid("", OPSET)])
    assert model.ir_version == onnx.IR_VERSION  # what make_model stamps: 14 with onnx 1.23
    assert readable_model(model).ir_version == ir_version_for(OPSET)


def test_an_opset_too_new_for_this_ort_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("triton_ort.model.onnx_files.ort_max_ir_version", lambda: ir_version_for(OPSET) - 1)
    model = helper.make_model(identity(), opset_imports=[helper.make_opsetid("", OPSET)])
    with pytest.raises(ValueError, match=rf"this onnxruntime reads IR <= {ir_version_for(OPSET) - 1}.*opset"):
        readable_model(model)


def test_the_ir_probe_reads_what_ort_says() -> None:
    """The probe's number is the boundary: that IR loads, the next is refused (on the GPU host's ORT
    1.31.1: "Unsupported model IR version: 14, max supported IR version: 13")."""
    model = helper.make_model(identity(), opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = ort_max_ir_version()
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    model.ir_version = ort_max_ir_version() + 1
    with pytest.raises(Exception, match=rf"max supported IR version: {ort_max_ir_version()}"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_onnx_files_are_read_in_one_place() -> None:
    """docs/ARCHITECTURE.md: every reader of an ONNX file goes through onnx_files.read_onnx_file (one
    way to leave external weights unread and to word an unreadable file)."""
    from tests.support.paths import ROOT

    package = ROOT / "src" / "triton_ort"
    readers = sorted(
        str(path.relative_to(package)) for path in package.rglob("*.py") if "onnx.load(" in path.read_text()
    )
    assert readers == ["model/onnx_files.py"], readers
