"""`kvant convert`: streams a safetensors checkpoint into compressed-tensors INT4, shard by shard."""
