"""Hooks around the ONNX model, in-process on CPU with the real ORT session: the shipped example's
answers, gathering through the hooks, failures isolated per request and naming the hook, load errors."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from numpy.typing import NDArray

from tests.support.hooks_support import EXAMPLE, STRICT_HOOKS, example_config
from tests.support.paths import demo_instance_config, demo_onnx
from triton_ort import ConfigError, HookError, InputError, ModelInstance
from triton_ort.harness.reference import reference_outputs
from triton_ort.runtime.hooked_runner import HookedRunner


def instance_with(tmp_path: Path, hooks_source: str | None, **config: Any) -> ModelInstance:
    """The example's config, with the hooks module replaced by `hooks_source` (None: the shipped one)."""
    version = tmp_path / "1"
    version.mkdir(exist_ok=True)
    source = (EXAMPLE / "1" / "hooks.py").read_text() if hooks_source is None else hooks_source
    (version / "hooks.py").write_text(textwrap.dedent(source))
    return ModelInstance({**example_config(), **config}, version, "CPU", 0)


def reference(raw: NDArray[Any], top_k: int = 2) -> dict[str, NDArray[Any]]:
    """The example's ops, written again in numpy around in-process ORT: normalise, run, softmax, top-k."""
    x = (raw.astype(np.float32) - 127.5) / 127.5
    logits = reference_outputs(demo_onnx(), {"np_script_embeddings": x})["np_logits"]
    exp = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = exp / exp.sum(axis=1, keepdims=True)
    classes = np.argsort(-probabilities, axis=1, kind="stable")[:, :top_k]
    return {"top_scores": np.take_along_axis(probabilities, classes, 1), "top_classes": classes}


def raw_request(rows: int, seed: int) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    return {"raw_embeddings": torch.from_numpy(rng.integers(0, 250, (rows, 2010), dtype=np.uint8))}


def assert_matches(result: object, raw: torch.Tensor) -> None:
    assert isinstance(result, Mapping), result
    want = reference(raw.numpy())
    np.testing.assert_allclose(result["top_scores"].numpy(), want["top_scores"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(result["top_classes"].numpy(), want["top_classes"])
    assert result["top_classes"].dtype == torch.int64


def test_the_shipped_example_matches_the_same_ops_in_process(tmp_path: Path) -> None:
    instance = instance_with(tmp_path, None)
    request = raw_request(5, seed=1)
    (result,) = instance.infer([request])
    assert_matches(result, request["raw_embeddings"])


def test_gathered_requests_run_the_hooks_once_and_are_split_back(tmp_path: Path) -> None:
    recording = (EXAMPLE / "1" / "hooks.py").read_text() + textwrap.dedent(
        """
        SEEN = []
        _example_preprocess = preprocess

        def preprocess(inputs):
            SEEN.append(tuple(inputs["raw_embeddings"].shape))
            return _example_preprocess(inputs)
        """
    )
    instance = instance_with(tmp_path, recording)
    assert isinstance(instance.batch_runner, HookedRunner)
    seen = instance.batch_runner.hooks.preprocess.__globals__["SEEN"]  # type: ignore[union-attr]
    seen.clear()  # the warm-up ran it once
    requests = [raw_request(rows, seed=rows) for rows in (1, 3, 2)]
    runs_before = instance.runner.stats.ort_runs
    results = instance.infer(requests)
    assert seen == [(6, 2010)], "preprocess should see the three requests as one batch of 6 rows"
    assert instance.runner.stats.ort_runs - runs_before == 1
    for result, request in zip(results, requests, strict=True):
        assert_matches(result, request["raw_embeddings"])
        assert isinstance(result, dict)
        assert result["top_scores"].shape[0] == request["raw_embeddings"].shape[0]


def test_a_hook_failure_fails_only_its_request_and_names_the_hook(tmp_path: Path) -> None:
    instance = instance_with(tmp_path, STRICT_HOOKS)  # 255 raises, 254 is rejected
    requests = [raw_request(2, seed=i) for i in range(4)]
    requests[1]["raw_embeddings"][1, 7] = 255  # the hook raises ValueError: the model's fault
    requests[2]["raw_embeddings"][0, 3] = 254  # the hook rejects it with InputError: the client's fault
    results = instance.infer(requests)
    hook = f"{tmp_path / '1' / 'hooks.py'}:preprocess"
    assert isinstance(results[1], HookError) and not isinstance(results[1], InputError)
    assert str(results[1]) == f"{hook} raised ValueError: a value of 255 is not allowed"
    assert isinstance(results[2], InputError)
    assert str(results[2]) == f"{hook} rejected the request: 254 is reserved"
    for i in (0, 3):
        assert isinstance(results[i], dict), results[i]


RIGHT_POSTPROCESS = """
import torch

def postprocess(outputs, inputs):
    scores, classes = torch.topk(outputs["np_logits"], 2, dim=1)
    return {"top_scores": scores, "top_classes": classes}
"""


@pytest.mark.parametrize(
    ("hooks_source", "message"),
    [
        (
            "def preprocess(inputs):\n    return {'np_script_embeddings': inputs['raw_embeddings']}\n",
            ":preprocess returned tensors that do not fit the ONNX model: input 'np_script_embeddings': "
            "expected FP32",
        ),
        (
            "def preprocess(inputs):\n    return {'features': inputs['raw_embeddings'].float()}\n",
            ":preprocess returned tensors that do not fit the ONNX model: unknown input(s) ['features']",
        ),
        ("def preprocess(inputs):\n    return None\n", "expected a dict of str -> torch.Tensor, got None"),
        (
            "import torch\n"
            "def preprocess(inputs):\n    return {'np_script_embeddings': inputs['raw_embeddings'].float()}\n"
            "def postprocess(outputs, inputs):\n"
            "    return {'top_scores': outputs['np_logits'], 'top_classes': outputs['np_logits']}\n",
            ":postprocess returned outputs that do not fit config.pbtxt: output 'top_classes': expected "
            "INT64 (torch.int64), got torch.float32",
        ),
        (
            "def preprocess(inputs):\n    return {'np_script_embeddings': inputs['raw_embeddings'].float()}\n"
            "def postprocess(outputs, inputs):\n"
            "    return {'top_scores': outputs['np_logits'], 'logits': outputs['np_logits']}\n",
            ":postprocess returned outputs that do not fit config.pbtxt: unknown output(s) ['logits'], "
            "missing output(s) ['top_classes']; the model's outputs are ['top_classes', 'top_scores']",
        ),
        (
            "import torch\n"
            "def preprocess(inputs):\n    return {'np_script_embeddings': inputs['raw_embeddings'].float()}\n"
            "def postprocess(outputs, inputs):\n"
            "    s = outputs['np_logits'][:1]\n"
            "    return {'top_scores': s, 'top_classes': s.long()}\n",
            ":postprocess returned outputs that do not fit config.pbtxt: 'top_scores' has 1 rows on its "
            "batch axis for a batch of 3",
        ),
    ],
    ids=["wrong-dtype", "wrong-name", "not-a-dict", "wrong-output-dtype", "wrong-output-name", "rows-lost"],
)
def test_what_a_hook_returns_is_checked_and_the_error_names_it(
    tmp_path: Path, hooks_source: str, message: str
) -> None:
    if "def postprocess" not in hooks_source:
        hooks_source += RIGHT_POSTPROCESS
    instance = instance_with(tmp_path, hooks_source)
    (result,) = instance.infer([raw_request(3, seed=0)])
    assert isinstance(result, HookError), result
    assert str(tmp_path / "1" / "hooks.py") in str(result)
    assert message in str(result)


@pytest.mark.parametrize(
    ("hooks_source", "message"),
    [
        (None, "does not exist"),
        ("import not_a_module_anywhere\n", "failed to import: ModuleNotFoundError"),
        ("X = 1\n", "defines neither preprocess(inputs) nor postprocess(outputs, inputs)"),
        ("def postprocess(outputs):\n    return outputs\n", "must be callable as postprocess(outputs, in"),
    ],
    ids=["missing", "import-error", "no-hook", "wrong-arity"],
)
def test_a_bad_hooks_module_fails_the_load_naming_the_file(
    tmp_path: Path, hooks_source: str | None, message: str
) -> None:
    version = tmp_path / "1"
    version.mkdir()
    if hooks_source is not None:
        (version / "hooks.py").write_text(hooks_source)
    with pytest.raises(ConfigError, match="hooks") as caught:
        ModelInstance(example_config(), version, "CPU", 0)
    assert message in str(caught.value)


def test_the_hooks_parameter_must_name_a_python_file(tmp_path: Path) -> None:
    config = example_config()
    config["parameters"]["hooks"] = {"string_value": "hooks.txt"}
    with pytest.raises(ConfigError, match=r"parameter 'hooks': 'hooks.txt' is not a Python file"):
        ModelInstance(config, tmp_path, "CPU", 0)


def test_without_preprocess_the_inputs_are_still_checked_against_the_onnx_file(tmp_path: Path) -> None:
    only_post = "def postprocess(outputs, inputs):\n    return outputs\n"
    with pytest.raises(ConfigError, match="input 'raw_embeddings' is not in the ONNX file"):
        instance_with(tmp_path, only_post)


def test_a_model_without_hooks_runs_the_runner_directly(tmp_path: Path) -> None:
    config = demo_instance_config(8, onnx_file=str(demo_onnx()))
    instance = ModelInstance(config, tmp_path, "CPU", 0)
    assert instance.batch_runner is instance.runner  # nothing between gathering and the runner


def test_a_request_that_does_not_fit_the_config_is_the_clients_error(tmp_path: Path) -> None:
    instance = instance_with(tmp_path, None)
    (result,) = instance.infer([{"raw_embeddings": torch.zeros(2, 2010)}])
    assert isinstance(result, InputError) and not isinstance(result, HookError)
    assert str(result) == "input 'raw_embeddings': expected UINT8 (torch.uint8), got torch.float32"


def test_without_a_batch_axis_in_the_config_requests_run_through_the_hooks_one_by_one(
    tmp_path: Path,
) -> None:
    config = example_config()
    config["max_batch_size"] = 0
    for entry in (*config["input"], *config["output"]):
        entry["dims"] = [-1, *[int(d) for d in entry["dims"]]]
    version = tmp_path / "1"
    version.mkdir()
    (version / "hooks.py").write_text((EXAMPLE / "1" / "hooks.py").read_text())
    instance = ModelInstance(config, version, "CPU", 0)
    requests = [raw_request(rows, seed=rows) for rows in (2, 3)]
    runs_before = instance.runner.stats.ort_runs
    results = instance.infer(requests)
    assert instance.runner.stats.ort_runs - runs_before == 2  # nothing says the outputs can be split
    for result, request in zip(results, requests, strict=True):
        assert_matches(result, request["raw_embeddings"])


def test_preprocess_only_serves_just_the_outputs_the_config_lists(tmp_path: Path) -> None:
    """Without postprocess the session's outputs go to the client as they are: only those config.pbtxt
    serves, even when the ONNX file has more."""
    from tests.support import graphs

    onnx_path = graphs.multi_io(tmp_path / "multi_io.onnx")
    version = tmp_path / "1"
    version.mkdir()
    (version / "hooks.py").write_text(
        "import torch\n\ndef preprocess(inputs):\n"
        "    return {'a': inputs['x'].to(torch.float16), 'b': torch.zeros(inputs['x'].shape[0], 4, "
        "dtype=torch.int64), 'c': torch.zeros(inputs['x'].shape[0], 2, dtype=torch.bool)}\n"
    )
    config: dict[str, Any] = {
        "max_batch_size": 8,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [3]}],
        "output": [{"name": "a_twice", "data_type": "TYPE_FP16", "dims": [3]}],
        "parameters": {
            "onnx_file": {"string_value": str(onnx_path)},
            "hooks": {"string_value": "hooks.py"},
            "intra_op_thread_count": {"string_value": "1"},
        },
    }
    instance = ModelInstance(config, version, "CPU", 0)
    x = torch.rand(2, 3)
    (result,) = instance.infer([{"x": x}])
    assert isinstance(result, dict), result
    assert list(result) == ["a_twice"]
    torch.testing.assert_close(result["a_twice"], (x + x).to(torch.float16))


# A client input of any width, resized to the model's 2010 by preprocess, as images of several sizes are
# resized to a CNN's: requests of different widths are different groups, yet their model inputs agree.
RESIZING_HOOKS = """
import torch
from triton_ort import InputError

INPUTS = {"raw": ("UINT8", [-1, -1])}
OUTPUTS = {"top_scores": ("FP32", [-1, 2]), "top_classes": ("INT64", [-1, 2])}
SEEN = []

def preprocess(inputs):
    raw = inputs["raw"]
    SEEN.append(("pre", tuple(raw.shape)))
    if raw.shape[1] == 7:
        raise InputError("7 columns are refused")
    x = torch.nn.functional.interpolate(raw[:, None, :].to(torch.float32), size=2010, mode="linear")
    return {"np_script_embeddings": (x[:, 0, :] - 127.5) / 127.5}

def postprocess(outputs, inputs):
    SEEN.append(("post", tuple(outputs["np_logits"].shape), tuple(inputs["raw"].shape)))
    scores, classes = torch.topk(torch.softmax(outputs["np_logits"], dim=1), 2, dim=1)
    return {"top_scores": scores, "top_classes": classes}
"""


def _resizing_instance(tmp_path: Path, **parameters: str) -> tuple[ModelInstance, list[Any]]:
    """The resizing hooks' model; `parameters` set config parameters beside the example's."""
    config = example_config()
    config["input"] = [{"name": "raw", "data_type": "TYPE_UINT8", "dims": ["-1"]}]
    set_here = {key: {"string_value": value} for key, value in parameters.items()}
    config["parameters"] = {**config["parameters"], **set_here}
    instance = instance_with(tmp_path, RESIZING_HOOKS, input=config["input"], parameters=config["parameters"])
    assert isinstance(instance.batch_runner, HookedRunner)
    seen: list[Any] = instance.batch_runner.hooks.preprocess.__globals__["SEEN"]  # type: ignore[union-attr]
    seen.clear()  # the warm-up ran the hooks
    return instance, seen


def _width_request(rows: int, width: int, seed: int) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    return {"raw": torch.from_numpy(rng.integers(0, 250, (rows, width), dtype=np.uint8))}


def test_groups_of_different_sizes_run_the_model_once_after_preprocess(tmp_path: Path) -> None:
    instance, seen = _resizing_instance(tmp_path)
    requests = [_width_request(1, 1000, 1), _width_request(2, 3000, 2), _width_request(3, 1000, 3)]
    alone = [instance.infer([request])[0] for request in requests]
    seen.clear()
    runs_before = instance.runner.stats.ort_runs
    results = instance.infer(requests)
    # preprocess per group (the two of width 1000 together), one ORT run, postprocess per group
    assert instance.runner.stats.ort_runs - runs_before == 1
    assert seen == [
        ("pre", (4, 1000)),
        ("pre", (2, 3000)),
        ("post", (4, 2), (4, 1000)),
        ("post", (2, 2), (2, 3000)),
    ]
    for result, expected in zip(results, alone, strict=True):
        assert isinstance(result, dict) and isinstance(expected, dict)
        torch.testing.assert_close(result["top_scores"], expected["top_scores"], rtol=1e-5, atol=1e-6)
        assert torch.equal(result["top_classes"], expected["top_classes"])


def test_a_group_that_preprocess_refuses_fails_alone_when_groups_run_together(tmp_path: Path) -> None:
    instance, _ = _resizing_instance(tmp_path)
    requests = [_width_request(1, 1000, 1), _width_request(1, 7, 2), _width_request(2, 3000, 3)]
    results = instance.infer(requests)
    assert isinstance(results[1], InputError) and "7 columns are refused" in str(results[1])
    assert isinstance(results[0], dict) and isinstance(results[2], dict)
    assert results[2]["top_scores"].shape == (2, 2)


def _ort_runs_for_two_widths(instance: ModelInstance) -> int:
    """ORT runs for one execute of two requests of different widths, both answered."""
    runs_before = instance.runner.stats.ort_runs
    results = instance.infer([_width_request(1, 1000, 1), _width_request(2, 3000, 2)])
    assert all(isinstance(result, dict) for result in results)
    return instance.runner.stats.ort_runs - runs_before


def test_gather_after_preprocess_no_runs_each_group_on_its_own(tmp_path: Path) -> None:
    """The parameter turns the joint run off (and `auto` leaves it off on GPU instances, where it has not
    run on the GPU host yet): each shape then has its own ORT run, as before."""
    instance, _ = _resizing_instance(tmp_path, gather_after_preprocess="no")
    assert _ort_runs_for_two_widths(instance) == 2
    assert isinstance(instance.batch_runner, HookedRunner) and not instance.batch_runner.groups_together


def test_groups_are_not_run_together_where_the_plan_does_not_gather(tmp_path: Path) -> None:
    """gather_requests no (a graph that mixes rows across the batch axis) keeps every request in its own
    ORT run, also when preprocess would make their shapes agree."""
    instance, _ = _resizing_instance(tmp_path, gather_requests="no")
    assert _ort_runs_for_two_widths(instance) == 2
