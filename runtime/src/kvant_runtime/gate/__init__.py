"""The admission gate: a token-aware reverse proxy in front of one engine.

- `limits`: the limits file (the ConfigMap the operator publishes) and its validation;
- `admission`: who may run now, who waits, who is turned away (pure logic);
- `concurrency`: the local fast loop's AIMD rule for the effective concurrency;
- `engine_metrics`: reading the engine's `/metrics` and `/get_server_info`;
- `loops`: the background loops (limits reload, engine metrics → concurrency);
- `gate_metrics`: the gate's own Prometheus metrics (`kvant_gate_*`);
- `proxy`: the aiohttp handlers;
- `server`: wires it all together; `cli`: `kvant gate`.
"""
