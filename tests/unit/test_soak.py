"""The soak's memory verdicts: each of the stubs' RSS, tritonserver's RSS and GPU memory on its own floor,
which requests in flight do not move and a leak does."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from client.soak import (
    MemoryReadings,
    ModelFacts,
    bad_requests,
    floor_growth,
    good_requests,
    memory_failures,
    memory_limits,
    parse_args,
)
from tests.support import graphs
from triton_ort.harness.processes import MemorySnapshot
from triton_ort.harness.releases import release_for
from triton_ort.harness.transport import TensorMeta

MIB = 1024 * 1024


def _readings(leak_mib: float, swing_mib: float, count: int = 60, seed: int = 0) -> list[int]:
    """A flat 400 MiB, plus up to `swing_mib` of transient memory at random, plus a linear leak."""
    rng = np.random.default_rng(seed)
    leak = np.linspace(0, leak_mib, count)
    swing = rng.uniform(0, swing_mib, count)
    return [int((400 + a + b) * MIB) for a, b in zip(leak, swing, strict=True)]


def test_transient_memory_is_not_growth() -> None:
    # tritonserver under the CI soak: single readings up to 60 MiB apart with no trend; comparing the
    # first reading with the last once failed a 64 MiB limit this way
    for seed in range(20):
        growth = floor_growth(_readings(leak_mib=0, swing_mib=60, seed=seed))
        assert growth is not None and abs(growth) < 20 * MIB, seed


def test_a_leak_raises_the_floor() -> None:
    for seed in range(20):
        growth = floor_growth(_readings(leak_mib=120, swing_mib=60, seed=seed))
        assert growth is not None and growth > 64 * MIB, seed


def test_too_few_readings_measure_nothing() -> None:
    assert floor_growth([]) is None
    assert floor_growth([400 * MIB]) is None
    assert floor_growth([400 * MIB, 500 * MIB]) == 100 * MIB


def _series(base_mib: float, leak_mib: float, swing_mib: float, seed: int, count: int = 60) -> list[int]:
    return [r - 400 * MIB + int(base_mib * MIB) for r in _readings(leak_mib, swing_mib, count, seed)]


def _verdicts(readings: MemoryReadings) -> list[str]:
    return memory_failures(readings.growth(), memory_limits(parse_args([])))


def test_the_gpu_hosts_flat_run_passes_every_verdict() -> None:
    """Shaped like the 200,000-request run on the GPU host (docs/reliability.md): the stub 974 -> 976 MiB,
    tritonserver swinging 725-772 MiB with no trend, GPU memory flat."""
    for seed in range(20):
        readings = MemoryReadings(
            tritonserver=_series(725, leak_mib=0, swing_mib=47, seed=seed),
            stubs=_series(974, leak_mib=2, swing_mib=1, seed=seed + 100),
            gpu=_series(1568, leak_mib=0, swing_mib=0, seed=seed, count=24),
        )
        assert _verdicts(readings) == [], seed


def test_a_stub_leak_fails_though_the_sum_of_all_would_have_passed() -> None:
    # 60 MiB planted in the stub over the run (1 KiB per request at 60,000); the floor method sees about two
    # thirds of a steady leak (the last third's lowest against the first's), 40 MiB here
    for seed in range(20):
        readings = MemoryReadings(
            tritonserver=_series(725, leak_mib=0, swing_mib=47, seed=seed),
            stubs=_series(974, leak_mib=60, swing_mib=1, seed=seed + 100),
        )
        summed = floor_growth([a + b for a, b in zip(readings.tritonserver, readings.stubs, strict=True)])
        assert summed is not None and summed <= 64 * MIB  # the one limit the sum had let it through
        failures = _verdicts(readings)
        assert len(failures) == 1 and failures[0].startswith("the stubs' RSS grew"), (seed, failures)
        assert "limit 32 MiB" in failures[0]


def test_a_tritonserver_leak_and_a_gpu_leak_fail_on_their_own() -> None:
    readings = MemoryReadings(
        tritonserver=_series(725, leak_mib=240, swing_mib=47, seed=1),
        stubs=_series(974, leak_mib=0, swing_mib=1, seed=2),
        gpu=_series(1568, leak_mib=120, swing_mib=0, seed=3, count=24),
    )
    failures = _verdicts(readings)
    assert [f.split(" grew ")[0] for f in failures] == ["tritonserver's RSS", "GPU memory"], failures


def test_a_snapshot_splits_into_tritonserver_and_its_stubs() -> None:
    readings = MemoryReadings()
    readings.add(
        MemorySnapshot(rss={10: 700 * MIB, 11: 300 * MIB, 12: 200 * MIB}, gpu={10: MIB, 11: MIB}), 10
    )
    readings.add(MemorySnapshot(rss={10: 710 * MIB, 11: 300 * MIB, 12: 200 * MIB}, gpu=None), 10)
    assert readings.tritonserver == [700 * MIB, 710 * MIB]
    assert readings.stubs == [500 * MIB, 500 * MIB]
    assert readings.gpu == [2 * MIB]  # nvidia-smi is read on some readings only
    assert readings.growth() == {"tritonserver": 10 * MIB, "stubs": 0, "gpu": None}


def test_optional_inputs_are_sent_sometimes_and_never_required(tmp_path: Path) -> None:
    """`offset` is optional (an overridable initializer): good requests go with and without it and each
    answer is the one ONNX Runtime gives for what was sent; no malformed request counts on it, and the
    missing input is a required one, refused in Triton's words for a model with optional inputs."""
    onnx_path = graphs.overridable(tmp_path / "model.onnx")
    facts = ModelFacts(
        name="overridable",
        inputs=[TensorMeta("x", "FP32", (-1, 4)), TensorMeta("offset", "FP32", (-1, 4))],
        outputs=["y"],
        max_batch_size=8,
        onnx_path=onnx_path,
        optional=frozenset({"offset"}),
    )
    good = good_requests(facts, count=20, max_rows=4, seed=3)
    sent = [sorted(t.name for t in request.inputs) for request in good]
    assert ["offset", "x"] in sent and ["x"] in sent, sent
    for request in good:
        arrays = {t.name: t.array for t in request.inputs}
        assert request.want is not None
        want = arrays["x"] * graphs.SCALE_DEFAULT + arrays.get("offset", 0.0)
        np.testing.assert_allclose(request.want["y"], want, rtol=1e-6)
    bad = {request.kind: request for request in bad_requests(facts, release_for("2.41.0"), seed=3)}
    assert all("offset" not in {t.name for t in request.inputs} for request in bad.values())
    missing = bad["missing_input"]
    assert [t.name for t in missing.inputs] == [] and missing.error is not None
    message = "expected number of inputs between 1 and 2 but got 0 inputs for model 'overridable'"
    assert missing.error.search(message), missing.error.pattern
