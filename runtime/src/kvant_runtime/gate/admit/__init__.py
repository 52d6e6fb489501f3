"""The gate's admission stages, each one job (docs/concepts/admission.md):

- `claims`: what a request asks for (`Waiter`), what it holds once granted (`Ticket`), and the one
  in-flight account (`Held`);
- `room`: what the engine can hold now (`Room`), the signal every policy reads;
- `policies`: the registered policies and `over()`, the one predicate that says which of them a
  request would break if it started now; each policy is a module of its own (`concurrency_limit`,
  `token_budget`, `engine_queue`, `engine_snapshot`, `kv_peak`, `critical_reserve`);
- `fair_share` and `waiting_room`: the order of the queue (class, then fair share, then deadline);
- `shedding`: whom a full queue gives up;
- `kvant_runtime.gate.admission`: the one writer, where the grant is taken.
"""
