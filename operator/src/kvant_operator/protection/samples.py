"""Reading engine metrics for protection: from Prometheus's HTTP API, or straight from the pods."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from kvant_operator.protection.decide import Sample

Obj = dict[str, Any]
TOKEN_USAGE = "sglang:token_usage"
RETRACTIONS = "sglang:num_retracted_requests_total"
_TIMEOUT = 3.0


class MetricsUnavailable(RuntimeError):
    """No fresh metrics: the reason names the source and what failed."""


@dataclass
class CounterMemory:
    """The last retraction counter per replica, to turn the counter into a rate between two scrapes."""

    last: dict[str, tuple[float, float]] = field(default_factory=dict)  # replica -> (time, value)

    def rate_per_minute(self, replica: str, value: float, now: float) -> float | None:
        previous = self.last.get(replica)
        self.last[replica] = (now, value)
        if previous is None or now <= previous[0] or value < previous[1]:
            return None  # first sight, or the engine restarted and its counter reset
        return (value - previous[1]) * 60.0 / (now - previous[0])


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
        retractions = values.get(RETRACTIONS)
        rate = (
            memory.rate_per_minute(name, retractions, time.monotonic()) if retractions is not None else None
        )
        samples.append(Sample(name, values[TOKEN_USAGE], rate))
    return samples


def _values(text: str) -> dict[str, float]:
    """The max over label sets of each metric we read (one series per TP rank)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (TOKEN_USAGE, RETRACTIONS):
                values[sample.name] = max(values.get(sample.name, 0.0), float(sample.value))
    return values


def query_prometheus(url: str, namespace: str, pod_regex: str, stale_after: float) -> list[Sample]:
    selector = f'{{namespace="{namespace}",pod=~"{pod_regex}"}}'
    usage = _query(url, f"max by (pod) ({TOKEN_USAGE}{selector})")
    ages = {
        r["metric"]["pod"]: float(r["value"][1])
        for r in _query(url, f"max by (pod) (time() - timestamp({TOKEN_USAGE}{selector}))")
    }
    rates = {
        r["metric"]["pod"]: float(r["value"][1])
        for r in _query(url, f"sum by (pod) (rate({RETRACTIONS}{selector}[1m])) * 60")
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
