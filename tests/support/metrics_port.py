"""Reading Triton's metrics port, for tests that check what a scrape sees."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from triton_ort.harness.server import LocalTritonServer

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(server: LocalTritonServer) -> Samples:
    """Every sample on the metrics port, by name and labels (the parser names counters with _total)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def series(samples: Samples, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The series of `name` whose labels include `labels`: label set -> value."""
    wanted = set(labels.items())
    return {found: value for (n, found), value in samples.items() if n == name and wanted <= set(found)}
