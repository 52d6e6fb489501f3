"""What SGLang's CPU backend cannot serve at all, said once for the API's admission rule (which refuses
the spec) and the launcher's check (which refuses to start an engine from a spec that got past it)."""

from __future__ import annotations

# srt/mem_cache/kv_cache_dtype.py in SGLang 0.5.23 raises this on any CPU, AMX or not.
CPU_E5M2_REASON = (
    "SGLang 0.5.23 has no e5m2 KV cache on CPU ('--kv-cache-dtype fp8_e5m2 is not supported on CPU'); "
    "use kvCache.dtype fp8_e4m3 (needs Intel AMX) or bf16"
)
