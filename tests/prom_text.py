"""Reading Prometheus text exposition in tests."""

from __future__ import annotations


def metric_sum(text: str, name: str) -> float:
    """A metric summed over all its series, labelled or not (0 when it has none)."""
    series = [line for line in text.splitlines() if line.split("{")[0].split(" ")[0] == name]
    return sum(float(line.rsplit(" ", 1)[1]) for line in series)
