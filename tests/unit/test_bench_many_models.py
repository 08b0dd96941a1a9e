"""diagnostics.bench_many_models' repository: eight models the server's checks accept, and an ensemble whose
answer is every model's own."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from client.load import Workload
from diagnostics.bench_many_models import ENSEMBLE, ROWS, ensemble_workload, model_names, write_repository
from triton_ort.harness.checks import check_repository
from triton_ort.harness.repository import read_config


def test_the_repository_holds_eight_models_and_their_ensemble(tmp_path: Path) -> None:
    write_repository(tmp_path, instances=2)
    check_repository(tmp_path)  # raises on a missing file or an unreadable config
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*model_names(), ENSEMBLE])
    assert all(read_config(tmp_path / name).instance_group[0].count == 2 for name in model_names())
    steps = read_config(tmp_path / ENSEMBLE).ensemble_scheduling.step
    assert [step.model_name for step in steps] == model_names()
    works = {name: Workload.build(name, tmp_path, ROWS) for name in model_names()}
    answers = {name: work.reference["y"] for name, work in works.items()}
    assert len({a.tobytes() for a in answers.values()}) == len(answers)  # eight different models
    combined = ensemble_workload(works)
    assert all(np.array_equal(combined.reference[f"y_{n}"], answers[n]) for n in answers)
