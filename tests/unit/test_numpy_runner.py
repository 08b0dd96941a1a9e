"""A runner on numpy arrays (arrays.NumpyArrays, a CPU instance's without hooks): the answers of the runner on
torch, request by request and gathered, over lending rounds; and an instance that never imports torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tests.support import graphs
from tests.support.hooks_support import EXAMPLE, example_config
from tests.support.paths import ROOT, demo_instance_config, demo_onnx
from triton_ort.errors import InputError
from triton_ort.runtime.arrays import NumpyArrays
from triton_ort.runtime.gather import run_requests
from triton_ort.runtime.instance import ModelInstance
from triton_ort.runtime.runner import IOBindingRunner
from triton_ort.runtime.session import Placement
from triton_ort.runtime.stats import RunnerStats

Requests = list[dict[str, np.ndarray[Any, Any]]]


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[Path], Path]
    requests: Callable[[np.random.Generator], Requests]


def _floats(rng: np.random.Generator, *shape: int) -> np.ndarray[Any, Any]:
    return rng.standard_normal(shape).astype(np.float32)


CASES = (
    Case(
        "demo",
        lambda path: demo_onnx(),
        lambda rng: [{"np_script_embeddings": _floats(rng, r, 2010)} for r in (1, 3, 2)],
    ),
    Case(
        "multi_io",  # fp16, int64 and bool
        graphs.multi_io,
        lambda rng: [
            {
                "a": _floats(rng, r, 3).astype(np.float16),
                "b": rng.integers(-5, 5, (r, 4)),
                "c": rng.integers(0, 2, (r, 2)).astype(bool),
            }
            for r in (2, 1, 3)
        ],
    ),
    Case(  # a data-dependent output shape: ORT allocates it, and it comes back as the runner's array
        "nonzero",
        graphs.nonzero,
        lambda rng: [{"x": np.array([[0, 1, 0, 2]] * r, np.float32)} for r in (1, 2)],
    ),
    Case(  # inputs with defaults: some sent, with equal and different values of the one-value input
        "overridable",
        graphs.overridable,
        lambda rng: [
            {"x": _floats(rng, 2, 4)},
            {"x": _floats(rng, 1, 4), "scale": np.array([3.0], np.float32)},
            {"x": _floats(rng, 2, 4), "scale": np.array([3.0], np.float32)},
            {"x": _floats(rng, 1, 4), "scale": np.array([5.0], np.float32), "offset": _floats(rng, 1, 4)},
        ],
    ),
    Case(  # session.run's path: strings as numpy objects, numbers beside them
        "strings",
        graphs.strings_beside_numbers,
        lambda rng: [{"s": np.array([b"a", "é".encode()], object), "x": _floats(rng, 2, 2)}],
    ),
    Case(  # an output computed at another size than its axis name gives: run again with ORT's allocation
        "decoder_step",
        graphs.decoder_step,
        lambda rng: [
            {"x": _floats(rng, 1, 2), "past": _floats(rng, 1, 3), "attention_mask": np.ones((1, 9), np.int64)}
        ],
    ),
)


def _runner(path: Path, on_numpy: bool) -> IOBindingRunner:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return IOBindingRunner(session, Placement("cpu"), on_numpy=on_numpy)


def _as_torch(tensors: dict[str, Any]) -> dict[str, Any]:
    return {name: a if a.dtype == object else torch.from_numpy(a) for name, a in tensors.items()}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
@pytest.mark.parametrize("gather", [False, True], ids=["alone", "gathered"])
def test_a_runner_on_numpy_answers_as_the_runner_on_torch(case: Case, gather: bool, tmp_path: Path) -> None:
    path = case.build(tmp_path / f"{case.name}.onnx")
    on_numpy, on_torch = _runner(path, on_numpy=True), _runner(path, on_numpy=False)
    for round_ in range(3):  # lending rounds: cached plans and their buffers written again
        requests = case.requests(np.random.default_rng(round_))
        on_numpy.reclaim_outputs()
        on_torch.reclaim_outputs()
        got = run_requests(on_numpy, requests, gather)
        want = run_requests(on_torch, [_as_torch(r) for r in requests], gather)
        for index, (answer, expected) in enumerate(zip(got, want, strict=True)):
            assert isinstance(answer, dict) and isinstance(expected, dict), (index, answer, expected)
            assert answer.keys() == expected.keys()
            for name, array in answer.items():
                assert isinstance(array, np.ndarray), f"{name}: {type(array).__name__}, not a numpy array"
                reference = expected[name]
                reference = reference if isinstance(reference, np.ndarray) else reference.numpy()
                np.testing.assert_array_equal(array, reference, err_msg=f"request {index}, output {name}")
    if gather and case.name == "demo":  # the three requests shared one run on both
        assert on_numpy.stats.ort_runs == on_torch.stats.ort_runs == 3


def test_numpy_staging_keeps_each_input_as_sent_and_copies_only_what_is_not_c_ordered() -> None:
    """A scalar stays a scalar (it is bound with the shape staging gives), a C-ordered array is itself."""
    arrays = NumpyArrays(RunnerStats())
    scalar, rows = np.array(0.5, np.float32), np.ones((2, 3), np.float32)
    assert arrays.to_device(scalar).shape == ()
    assert arrays.to_device(rows) is rows
    columns = arrays.to_device(rows.T)
    assert columns.flags.c_contiguous and columns.shape == (3, 2)


def test_a_numpy_runner_names_what_was_expected_in_numpy_terms() -> None:
    runner = _runner(demo_onnx(), on_numpy=True)
    with pytest.raises(
        InputError, match=r"input 'np_script_embeddings': expected FP32 \(float32\), got float64"
    ):
        runner.run({"np_script_embeddings": np.zeros((1, 2010))})


def test_only_a_cpu_instance_without_hooks_runs_on_numpy(tmp_path: Path) -> None:
    version = tmp_path / "1"
    version.mkdir()
    (version / "model.onnx").symlink_to(demo_onnx())
    config = demo_instance_config(8)
    assert ModelInstance(config, version, "CPU", 0, numpy_on_cpu=True).on_numpy
    assert not ModelInstance(config, version, "CPU", 0).on_numpy  # the library's callers get torch
    hooked = ModelInstance(example_config(), EXAMPLE / "1", "CPU", 0, numpy_on_cpu=True)
    assert not hooked.on_numpy  # hooks take and return torch tensors


def test_a_cpu_instance_on_numpy_loads_and_answers_without_importing_torch(tmp_path: Path) -> None:
    """In a fresh interpreter, as in a python-backend stub: load (warm-up included), answer one request
    and a gathered pair, and torch was never imported."""
    version = tmp_path / "1"
    version.mkdir()
    (version / "model.onnx").symlink_to(demo_onnx())
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        import numpy as np
        from tests.support.paths import demo_instance_config
        from triton_ort.runtime.instance import ModelInstance

        instance = ModelInstance(demo_instance_config(8, warmup="1,4"), Path({str(version)!r}), "CPU", 0,
                                 numpy_on_cpu=True)
        rows = [np.ones((r, 2010), np.float32) for r in (1, 2, 3)]
        answers = instance.infer([{{"np_script_embeddings": rows[0]}}])
        answers += instance.infer([{{"np_script_embeddings": r}} for r in rows[1:]])
        assert [a["np_logits"].shape for a in answers] == [(1, 2), (2, 2), (3, 2)], answers
        assert all(isinstance(a["np_logits"], np.ndarray) for a in answers)
        print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", f"torch was imported: {done.stdout}"


def test_without_torch_a_cpu_instance_serves_and_what_needs_torch_says_so(tmp_path: Path) -> None:
    """In a Python whose torch cannot be imported (an environment packed without it): the CPU instance
    without hooks loads and answers, the adapter sees no GPU, and a GPU instance or hooks say what is
    missing instead of a bare ImportError (the hooks module itself, which imports torch, would fail to load
    naming itself)."""
    version = tmp_path / "1"
    version.mkdir()
    (version / "model.onnx").symlink_to(demo_onnx())
    script = textwrap.dedent(
        f"""
        import sys
        from tests.support.hooks_support import EXAMPLE, example_config
        hooked = example_config()  # completed from the hooks' declarations, before torch goes
        for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
            del sys.modules[name]
        sys.modules["torch"] = None  # import torch raises, find_spec finds none
        from pathlib import Path
        import numpy as np
        from tests.support.paths import demo_instance_config
        from triton_ort.errors import TritonOrtError
        from triton_ort.runtime.instance import ModelInstance

        version = Path({str(version)!r})
        cpu = ModelInstance(demo_instance_config(8), version, "CPU", 0, numpy_on_cpu=True)
        answer = cpu.infer([{{"np_script_embeddings": np.ones((2, 2010), np.float32)}}])[0]
        print("cpu", answer["np_logits"].shape)
        for kind, config, folder in (("GPU", demo_instance_config(8), version),
                                     ("CPU", hooked, EXAMPLE / "1")):
            try:
                ModelInstance(config, folder, kind, 0, numpy_on_cpu=True)
            except TritonOrtError as error:
                print(kind, type(error).__name__, error)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "cpu (2, 2)", done.stdout
    assert lines[1].startswith("GPU ProviderError a GPU instance (device 0) runs on torch"), lines[1]
    assert "requirements-cuda.txt" in lines[1]
    assert lines[2].startswith("CPU ProviderError a CPU instance with hooks or BF16 tensors runs on torch")
