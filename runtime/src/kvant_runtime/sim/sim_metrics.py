"""The simulator's Prometheus metrics, named, typed and labelled exactly as SGLang's.

SGLang 0.5.23 defines them in `sglang/srt/observability/metrics_collector.py`:
scheduler metrics carry `SCHEDULER_LABELS`, tokenizer metrics carry
`TOKENIZER_LABELS` (some add `is_streaming`). A unit test parses that source
and compares, so an upstream rename fails the build. Units are SGLang's:
`token_usage` is a fraction in [0, 1], latencies are in seconds, throughput in
tokens per second. The histogram buckets are SGLang's defaults.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kvant_contracts import sglang_metrics as names
from kvant_runtime.sim.engine import Engine, Request, StepResult

SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
TOKENIZER_LABELS = ("model_name", "engine_type")
STREAMING_LABELS = (*TOKENIZER_LABELS, "is_streaming")

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (*TTFT_BUCKETS, 600, 1200, 1800, 2400)

# SGLang refreshes gen_throughput and num_retracted_reqs once per stats interval.
STATS_INTERVAL_S = 1.0


class EngineMetrics:
    def __init__(self, model_name: str, registry: CollectorRegistry, engine_type: str = "unified") -> None:
        self._scheduler = {"model_name": model_name, "engine_type": engine_type}
        self._scheduler.update(tp_rank="0", pp_rank="0", moe_ep_rank="0")
        self._tokenizer = {"model_name": model_name, "engine_type": engine_type}

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, SCHEDULER_LABELS, registry=registry)

        # Counter names keep SGLang's `_total`: prometheus_client drops it from the family name and
        # adds it back to the sample, as SGLang's own collector does.
        self.num_running_reqs = gauge(names.NUM_RUNNING_REQS, "Requests in the running batch.")
        self.num_queue_reqs = gauge(names.NUM_QUEUE_REQS, "Requests in the waiting queue.")
        self.token_usage = gauge(names.TOKEN_USAGE, "Fraction of the KV cache in use, 0 to 1.")
        self.kv_used_tokens = gauge(names.KV_USED_TOKENS, "KV cache slots held by requests.")
        self.kv_available_tokens = gauge(names.KV_AVAILABLE_TOKENS, "Free KV cache slots.")
        self.max_total_num_tokens = gauge(names.MAX_TOTAL_NUM_TOKENS, "KV cache capacity in tokens.")
        self.num_retracted_reqs = gauge(names.NUM_RETRACTED_REQS, "Requests retracted in the last interval.")
        self.gen_throughput = gauge(names.GEN_THROUGHPUT, "Generated tokens per second.")
        self.num_retracted_requests = Counter(
            names.NUM_RETRACTED_REQUESTS_TOTAL, "Requests retracted.", SCHEDULER_LABELS, registry=registry
        )
        self.prompt_tokens = Counter(
            names.PROMPT_TOKENS_TOTAL,
            "Prompt tokens of finished requests.",
            STREAMING_LABELS,
            registry=registry,
        )
        self.generation_tokens = Counter(
            names.GENERATION_TOKENS_TOTAL,
            "Generated tokens of finished requests.",
            STREAMING_LABELS,
            registry=registry,
        )
        self.time_to_first_token = Histogram(
            names.TIME_TO_FIRST_TOKEN_SECONDS,
            "Time to first token.",
            STREAMING_LABELS,
            buckets=TTFT_BUCKETS,
            registry=registry,
        )
        self.e2e_request_latency = Histogram(
            names.E2E_REQUEST_LATENCY_SECONDS,
            "End-to-end request latency.",
            STREAMING_LABELS,
            buckets=E2E_BUCKETS,
            registry=registry,
        )
        self._interval_start = 0.0
        self._interval_tokens = 0
        self._interval_retractions = 0

    def start(self, engine: Engine, now: float) -> None:
        """Publish the constants and the idle state; `now` opens the first stats interval."""
        self.max_total_num_tokens.labels(**self._scheduler).set(engine.config.kv_tokens)
        self.observe_state(engine)
        self.close_interval(now)

    def observe_state(self, engine: Engine) -> None:
        labels = self._scheduler
        self.num_running_reqs.labels(**labels).set(len(engine.running))
        self.num_queue_reqs.labels(**labels).set(len(engine.waiting))
        self.token_usage.labels(**labels).set(engine.token_usage)
        self.kv_used_tokens.labels(**labels).set(engine.used_kv_tokens)
        self.kv_available_tokens.labels(**labels).set(engine.free_kv_tokens)

    def observe_step(self, engine: Engine, step: StepResult) -> None:
        self.observe_state(engine)
        self.num_retracted_requests.labels(**self._scheduler).inc(len(step.retracted))
        self._interval_tokens += len(step.tokens)
        self._interval_retractions += len(step.retracted)
        elapsed = step.end - self._interval_start
        if elapsed >= STATS_INTERVAL_S:
            self.close_interval(step.end)

    def close_interval(self, now: float) -> None:
        """Publish the interval's throughput and retractions and start a new interval."""
        elapsed = now - self._interval_start
        throughput = self._interval_tokens / elapsed if elapsed > 0 else 0.0
        self.gen_throughput.labels(**self._scheduler).set(throughput)
        self.num_retracted_reqs.labels(**self._scheduler).set(self._interval_retractions)
        self._interval_start, self._interval_tokens, self._interval_retractions = now, 0, 0

    def observe_finished(self, request: Request, is_streaming: bool) -> None:
        labels = {**self._tokenizer, "is_streaming": "true" if is_streaming else "false"}
        self.prompt_tokens.labels(**labels).inc(request.prompt_tokens)
        self.generation_tokens.labels(**labels).inc(len(request.output_ids))
        if request.first_token_time is not None:
            self.time_to_first_token.labels(**labels).observe(request.first_token_time - request.arrival)
        if request.finish_time is not None:
            self.e2e_request_latency.labels(**labels).observe(request.finish_time - request.arrival)
