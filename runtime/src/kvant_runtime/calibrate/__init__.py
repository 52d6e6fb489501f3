"""`kvant calibrate`: FP8 KV-cache scales for an artifact, from a layer-streamed forward pass."""
