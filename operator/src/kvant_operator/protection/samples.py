"""Reading engine metrics for protection: from Prometheus's HTTP API, or straight from the pods."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from kvant_contracts import prometheus_text
from kvant_contracts.kube_object import Obj
from kvant_contracts.retraction_rate import RetractionRate, promql_retractions_per_minute
from kvant_contracts.sglang_metrics import (
    NUM_RETRACTED_REQUESTS_TOTAL,
    TOKEN_USAGE,
    Series,
    combine,
    promql_per_pod,
    scheduler_of,
)
from kvant_operator.protection.decide import Sample

_TIMEOUT = 3.0


class MetricsUnavailable(RuntimeError):
    """No fresh metrics: the reason names the source and what failed."""


@dataclass
class CounterMemory:
    """Each replica's retraction counter over time, as the rate the gate computes too."""

    rates: dict[str, RetractionRate] = field(default_factory=dict)  # replica -> its counter's history

    def rate_per_minute(self, replica: str, value: float, now: float) -> float | None:
        """None at first sight and after the engine restarted (its counter went down)."""
        return self.rates.setdefault(replica, RetractionRate()).observe(now, value).per_minute


def scrape_pods(pods: list[tuple[str, str]], port: int, memory: CounterMemory) -> list[Sample]:
    """Reads each (replica name, pod IP) engine's /metrics; every replica must answer."""
    samples = []
    for name, ip in pods:
        try:
            with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=_TIMEOUT) as response:
                text = response.read().decode()
        except (urllib.error.URLError, OSError) as err:
            raise MetricsUnavailable(
                f"engine metrics of replica {name} ({ip}:{port}) unreachable: {err}"
            ) from None
        values = _values(text)
        if TOKEN_USAGE not in values:
            raise MetricsUnavailable(f"replica {name} exports no {TOKEN_USAGE} (is --enable-metrics on?)")
        retractions = values.get(NUM_RETRACTED_REQUESTS_TOTAL)
        rate = (
            memory.rate_per_minute(name, retractions, time.monotonic()) if retractions is not None else None
        )
        samples.append(Sample(name, values[TOKEN_USAGE], rate))
    return samples


def _values(text: str) -> dict[str, float]:
    """The engine's value of each metric we read, its series combined as the contract says."""
    series: dict[str, list[Series]] = {TOKEN_USAGE: [], NUM_RETRACTED_REQUESTS_TOTAL: []}
    for sample in prometheus_text.samples(text):
        if sample.name in series:
            series[sample.name].append((scheduler_of(sample.labels), sample.value))
    combined = {name: combine(name, found) for name, found in series.items()}
    return {name: value for name, value in combined.items() if value is not None}


def query_prometheus(url: str, namespace: str, pod_regex: str, stale_after: float) -> list[Sample]:
    selector = f'{{namespace="{namespace}",pod=~"{pod_regex}"}}'
    usage = _query(url, promql_per_pod(TOKEN_USAGE, f"{TOKEN_USAGE}{selector}"))
    ages = {
        r["metric"]["pod"]: float(r["value"][1])
        for r in _query(url, f"max by (pod) (time() - timestamp({TOKEN_USAGE}{selector}))")
    }
    rates = {
        r["metric"]["pod"]: float(r["value"][1]) for r in _query(url, promql_retractions_per_minute(selector))
    }
    if not usage:
        raise MetricsUnavailable(f"Prometheus at {url} has no {TOKEN_USAGE} for {namespace}/{pod_regex}")
    stale = [pod for pod, age in ages.items() if age > stale_after]
    if stale:
        raise MetricsUnavailable(
            f"Prometheus metrics of {', '.join(sorted(stale))} are older than {stale_after:.0f}s"
        )
    return [Sample(r["metric"]["pod"], float(r["value"][1]), rates.get(r["metric"]["pod"])) for r in usage]


def _query(url: str, expr: str) -> list[Obj]:
    full = f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(full, timeout=_TIMEOUT) as response:
            body = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise MetricsUnavailable(f"Prometheus at {url} unreachable: {err}") from None
    if body.get("status") != "success":
        raise MetricsUnavailable(f"Prometheus at {url} rejected {expr!r}: {body.get('error')}")
    result: list[Obj] = body["data"]["result"]
    return result
