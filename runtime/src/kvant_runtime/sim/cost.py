"""How long a simulated step takes: a memory-bound decode model with three terms.

    decode step = decode_base
                + decode_per_request x batch
                + context tokens x kv_bytes_per_token / kv_read_bandwidth
    prefill     = prefill_base + prefill_per_token x tokens prefilled

- `decode_base`: reading the weights once per step plus launch and
  communication overhead; independent of the batch.
- `decode_per_request`: work that grows with the batch: sampling, scheduling
  and, for MoE models, the extra experts a larger batch routes to.
- the context term: attention reads every running request's whole KV cache
  once per step, so a step costs the KV bytes resident in the batch over the
  GPU's effective memory bandwidth. An FP8 cache holds half the bytes per
  token, so the same context reads in half the time.
- prefill is compute-bound and linear in the tokens prefilled, above a fixed
  `prefill_base`: a prefill is one forward pass too, with the same launch and
  weight-read overhead as a decode step. Without it a prefill of a few short
  prompts cost almost nothing, so the simulator beside the CPU engine admitted
  arrivals at a step boundary the engine had not reached yet and now and then
  ran a batch of 47-48 where the engine ran 41 (bench/README.md, "The simulator
  beside the real engine"). It is 0 in the GPU defaults, which no engine has
  fitted; the CPU profile sets it to the fitted decode base.

The defaults describe a 1T-class MoE on 8 x H200 in rough magnitude only;
they are flags so that a dry run can be fitted to a measured engine.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    decode_base_s: float = 0.010
    decode_per_request_s: float = 0.0005
    kv_bytes_per_token: int = 70_272
    kv_read_bytes_per_s: float = 3.5e12
    prefill_per_token_s: float = 20e-6
    prefill_base_s: float = 0.0

    def decode_seconds(self, batch: int, context_tokens: int) -> float:
        kv_read = context_tokens * self.kv_bytes_per_token / self.kv_read_bytes_per_s
        return self.decode_base_s + self.decode_per_request_s * batch + kv_read

    def prefill_seconds(self, tokens: int) -> float:
        # A decode engine's first step over prompts whose KV arrived by transfer computes nothing.
        return self.prefill_base_s + self.prefill_per_token_s * tokens if tokens else 0.0
