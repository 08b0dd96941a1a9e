"""diagnostics.inflight_floor on the real tritonserver: a python model that returns None from execute and
answers each request later from a thread of its own, through its response sender, is answered right where
the release has that (2.47 and later: the GPU test host's 2.51), and refused with the stub's own words
where it has not (2.41, CI's); the classic model answers on both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.commands import python_module
from triton_ort.harness.releases import release_for

pytestmark = pytest.mark.integration


def test_answers_from_other_threads_where_the_release_has_the_response_sender(tmp_path: Path) -> None:
    out = tmp_path / "inflight.json"
    python_module(
        "diagnostics.inflight_floor",
        *("--repository", str(tmp_path / "repository"), "--lanes", "2", "--wait-ms", "5"),
        *("--seconds", "0.3", "--warmup", "0.1", "--concurrency", "4", "--json", str(out)),
        timeout=600,
    )
    report = json.loads(out.read_text())
    classic, inflight = report["results"]["classic"], report["results"]["inflight_2"]
    assert classic["requests_per_s"] > 0, classic  # its answers were checked before it was timed
    if release_for(report["server_version"]).answers_through_response_sender:
        assert "error" not in inflight and inflight["requests_per_s"] > 0, inflight
    else:
        assert "Expected a list in the execute return" in inflight["error"], inflight
