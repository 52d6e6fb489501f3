"""The autoscaling contract: the gate's demand signal, the metric the cluster's autoscaler reads, and
the defaults of `spec.autoscaling`. Each is written here once.

The chain: each gate exports DEMAND_GAUGE → Prometheus scrapes it per pod → prometheus-adapter serves
`adapter_rule()`'s query as the custom metric DEMAND_METRIC on every engine pod → the
HorizontalPodAutoscaler the operator renders averages it over the model's engine pods (the
QuantizedModel's scale subresource selects them) and sets `spec.serving.replicas` through that
subresource → the operator rolls the Deployment to it.

Demand is what a replica is asked to hold over what it may hold now: the larger of its KV tokens (held
and waiting) over its token budget and its requests over the effective concurrency. 1.0 is exactly full;
above it requests wait or are refused. DEMAND_METRIC adds the share of requests refused for want of
room over REFUSAL_WINDOW.
See docs/concepts/autoscaling.md ("The signal: demand, in the model's own units").
"""

from __future__ import annotations

from typing import Final

from kvant_contracts.serving_pod import GATE_BUSY_REASONS

# The gate's gauge (one series per gate, i.e. per replica).
DEMAND_GAUGE: Final = "kvant_gate_demand"
# The custom metric the adapter serves per engine pod, and the HPA averages.
DEMAND_METRIC: Final = "kvant_demand"
# Where the gate's refusals are counted (the gate's Counter `kvant_gate_rejected`, with `_total`).
REJECTED_TOTAL: Final = "kvant_gate_rejected_total"
ADMITTED_TOTAL: Final = "kvant_gate_admitted_total"
# The window over which refusals are averaged into the demand.
REFUSAL_WINDOW: Final = "1m"
# Only refusals for want of room count (not a request too large for any replica, nor a bad key).
_BUSY: Final = f'reason=~"{"|".join(GATE_BUSY_REASONS)}"'

# The PromQL that turns the gate's series into the scaler's metric, for one pod or many. `{labels}`
# is the adapter's label matchers (`<<.LabelMatchers>>`), and `{by}` its group-by (`<<.GroupBy>>`).
DEMAND_QUERY_TEMPLATE: Final = (
    "max by ({by}) ("
    f"{DEMAND_GAUGE}{{{{{{labels}}}}}}"
    ") + ("
    f"sum by ({{by}}) (rate({REJECTED_TOTAL}{{{{{{labels}},{_BUSY}}}}}[{REFUSAL_WINDOW}]))"
    " / clamp_min("
    f"sum by ({{by}}) (rate({REJECTED_TOTAL}{{{{{{labels}},{_BUSY}}}}}[{REFUSAL_WINDOW}]))"
    f" + sum by ({{by}}) (rate({ADMITTED_TOTAL}{{{{{{labels}}}}}}[{REFUSAL_WINDOW}])), 1e-9)"
    ")"
)


def demand_query(labels: str, by: str = "namespace, pod") -> str:
    """The demand PromQL for the given label matchers (`namespace="a",pod=~"x|y"`)."""
    return DEMAND_QUERY_TEMPLATE.format(labels=labels, by=by)


def adapter_rule() -> dict[str, object]:
    """prometheus-adapter's rule (its `rules:` list entry) serving DEMAND_METRIC on pods."""
    return {
        "seriesQuery": f'{DEMAND_GAUGE}{{namespace!="",pod!=""}}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": f"^{DEMAND_GAUGE}$", "as": DEMAND_METRIC},
        "metricsQuery": demand_query("<<.LabelMatchers>>", "<<.GroupBy>>"),
    }


# spec.autoscaling's defaults (the API takes them from here).
DEFAULT_TARGET_DEMAND: Final = 0.8  # scale out before a replica is full: the headroom absorbs a burst
DEFAULT_SCALE_UP_STABILIZATION_SECONDS: Final = 0  # scale out at once: shedding costs requests now
DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS: Final = 300  # the HPA's own default: a lull is not a trend
