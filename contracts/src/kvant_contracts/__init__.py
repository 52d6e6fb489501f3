"""What the operator (no torch) and the runtime (no kopf) exchange or must decide alike, defined once.

- `int4_artifact`: which tensors an INT4 conversion quantizes, and the tensors it writes for each
  source tensor: the converter builds its output from it, the planner counts its bytes from it.
- `serving_pod`: the paths of the gate's window onto the engine, which the renderer probes.
- `sglang_metrics`: SGLang's metric names, and how one engine's series combine (each scheduler once).
- `retraction_rate`: retractions per minute, the rate behind maxRetractionsPerMinute, for the gate's
  loop and the operator's protection alike.
"""
