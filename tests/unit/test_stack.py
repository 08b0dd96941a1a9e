"""triton_ort.stack: the one-line causes and fixes `make venv` / `make run` stop with."""

from __future__ import annotations

import pytest

from triton_ort import stack


def test_cuda_majors_come_from_onnxruntime_gpu_extras() -> None:
    requirements = [
        "numpy>=1.21.6",
        'nvidia-cuda-runtime~=13.0; extra == "cuda"',
        'nvidia-cudnn-cu13~=9.0; extra == "cudnn"',
    ]
    assert stack._major_from_requirements(requirements, "nvidia-cuda-runtime") == 13
    assert stack._major_from_requirements(requirements, "nvidia-cudnn") == 9
    cu12 = ['nvidia-cuda-runtime-cu12~=12.0; extra == "cuda"']
    assert stack._major_from_requirements(cu12, "nvidia-cuda-runtime") == 12
    assert stack._major_from_requirements([], "nvidia-cudnn") is None


@pytest.mark.parametrize(
    ("installed", "expect", "cause"),
    [
        ({}, "cpu", "no ONNX Runtime is installed"),
        ({"onnxruntime": "1.32.0", "onnxruntime-gpu": "1.31.1"}, "cuda", "shadow each other"),
        ({"onnxruntime": "1.32.0"}, "cuda", "is a CPU build"),
    ],
)
def test_a_broken_ort_installation_stops_with_its_cause_and_fix(
    monkeypatch: pytest.MonkeyPatch, installed: dict[str, str], expect: str, cause: str
) -> None:
    monkeypatch.setattr(stack, "ort_distributions", lambda: installed)
    with pytest.raises(stack.StackError) as stopped:
        stack.check_distributions(expect)
    assert cause in str(stopped.value)
    assert "Fix:" in str(stopped.value)
    assert "\n" not in str(stopped.value)


def test_the_cpu_stack_of_this_venv_is_fine() -> None:
    assert stack.main(["--expect", "cpu"]) == 0
