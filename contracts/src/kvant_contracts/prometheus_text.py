"""Reading samples from a Prometheus text exposition (a `/metrics` page), the one way Kvant does it.

The operator, `kvant status`, the load generator, the e2e tests and the benches all read `/metrics`
pages (the gate's, SGLang's or the simulator's, a serving pod's merged one, the operator's) through
this module, which reads them with prometheus_client's own parser
(`prometheus_client.parser.text_string_to_metric_families`). A line scanner that splits on spaces and
`{` misreads label values holding spaces, commas, braces or escaped quotes, takes one metric for
another whose name it starts, and says nothing of a page it cannot read; the parser reads the
format as its exporters write it, and refuses what it cannot read. (The gate's scrape of its engine,
`kvant_runtime.gate.engine_metrics`, scans lines on purpose: it runs on the proxy's event loop.)

Names are the samples' names as exposed, which is also what PromQL sees: a counter's samples carry
`_total` (`kvant_gate_admitted_total`) and prometheus_client's `_created` samples have their own
name; a histogram's are `<name>_bucket` (with `le`), `<name>_sum` and `<name>_count`. Families are
not looked at. One rename comes from the parser: a counter whose `# TYPE` line and samples both lack
`_total` (`# TYPE x counter` then `x 1`) reads as `x_total`; every exporter Kvant reads
(prometheus_client, in SGLang, the simulator, the gate and the operator) writes `_total` on both.

A page the parser refuses raises `ExpositionError` (a ValueError), naming the first line it refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


class ExpositionError(ValueError):
    """Text that prometheus_client's parser refuses; the message names the line where it can."""


@dataclass(frozen=True)
class Sample:
    """One sample of a page: its exposed name, its labels and its value (timestamps are dropped)."""

    name: str
    labels: dict[str, str]
    value: float


def samples(text: str, name: str | None = None) -> list[Sample]:
    """Every sample of `text` in page order, or only those named `name`. Raises ExpositionError."""
    try:
        found = [
            Sample(sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]
    except (ValueError, IndexError) as error:  # IndexError: the parser on some garbage
        raise ExpositionError(_refused(text, error)) from error
    return found if name is None else [sample for sample in found if sample.name == name]


def value(text: str, name: str, /, **labels: str) -> float | None:
    """The value of the one sample named `name` whose labels include `labels`; None when there is none.
    Raises ExpositionError, and ValueError when several samples match (name more labels)."""
    matching = _matching(text, name, labels)
    if len(matching) > 1:
        raise ValueError(f"{len(matching)} samples of {name} have the labels {labels}: {matching[:3]}")
    return matching[0].value if matching else None


def total(text: str, name: str, /, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`: 0.0 when there is none.
    Raises ExpositionError."""
    return sum((sample.value for sample in _matching(text, name, labels)), 0.0)


def _matching(text: str, name: str, labels: dict[str, str]) -> list[Sample]:
    return [s for s in samples(text, name) if all(s.labels.get(k) == v for k, v in labels.items())]


def _refused(text: str, error: Exception) -> str:
    """The parser's complaint, with the first line it refuses on its own (its errors are a line's)."""
    reason = str(error) or type(error).__name__
    for number, line in enumerate(text.split("\n"), start=1):
        try:
            list(text_string_to_metric_families(line))
        except (ValueError, IndexError):
            return f"not Prometheus text exposition: line {number} {line[:200]!r}: {reason}"
    return f"not Prometheus text exposition: {reason}"
