"""The admission gate: a token-aware reverse proxy in front of one engine.

- `admission` and `admit/`: who may run now, who waits, who is turned away (pure logic, in stages:
  the engine's room, the registered policies, the waiting room's order, one grant, release);
- `engine_load`: the engine's `/v1/loads` snapshot, what `engine` admission acts on;
- `engine_metrics` and `concurrency`: the engine's `/metrics`, and the local loop's AIMD on its
  retractions;
- `forecast`, `drain_rate`, `queue_wait`, `rate_buckets`, `refusals`: output forecasts, the queue's
  drain rate, a queued request's expected wait, tenants' token rates, and the words of each refusal;
- `loops`: the background loops (limits, engine metrics, engine load);
- `limits_source` and `limits_watch`: the limits file and ConfigMap the operator publishes;
- `proxy`, `access`, `route_policy`, `answer_relay`, `answer_counts`, `server_info`, `port_relay`,
  `draining`: the HTTP edge;
- `gate_metrics`, `gate_server`, `gate_command`: the gate's metrics, the wiring, `kvant gate`.
"""
