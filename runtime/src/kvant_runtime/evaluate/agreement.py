"""Next-token agreement of a candidate with a reference, accumulated one sample at a time.

For every position the reference's and the candidate's next-token distributions are compared:
- KL divergence KL(reference || candidate), in nats, reported as the mean and the 99th percentile
  over all positions (the tail shows rare large errors a mean hides);
- top-1 agreement, the fraction of positions where both predict the same most likely token;
- perplexity of each model on the text itself, exp(mean negative log-likelihood of the true next token).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

P99 = 99.0


class Agreement:
    def __init__(self) -> None:
        self._kl: list[torch.Tensor] = []
        self._agreeing = 0
        self._positions = 0
        self._nll = {"reference": 0.0, "candidate": 0.0}
        self._predicted = 0

    def add(self, reference: torch.Tensor, candidate: torch.Tensor, tokens: torch.Tensor) -> None:
        """Logits `[positions, vocab]` of both models for one sample whose token ids are `tokens`."""
        ref_log = torch.log_softmax(reference.double(), dim=-1)
        cand_log = torch.log_softmax(candidate.double(), dim=-1)
        self._kl.append((ref_log.exp() * (ref_log - cand_log)).sum(dim=-1).clamp_min(0.0).cpu())
        self._agreeing += int((reference.argmax(dim=-1) == candidate.argmax(dim=-1)).sum())
        self._positions += reference.shape[0]
        targets = tokens[1:].to(reference.device)
        for name, log in (("reference", ref_log), ("candidate", cand_log)):
            self._nll[name] -= float(log[:-1].gather(-1, targets.unsqueeze(-1)).sum())
        self._predicted += int(targets.numel())

    def summary(self) -> dict[str, Any]:
        kl = torch.cat(self._kl).numpy()
        return {
            "meanKLDivergence": float(kl.mean()),
            "p99KLDivergence": float(np.percentile(kl, P99)),
            "top1Agreement": self._agreeing / self._positions,
            "perplexity": math.exp(self._nll["candidate"] / self._predicted),
            "referencePerplexity": math.exp(self._nll["reference"] / self._predicted),
            "positions": self._positions,
        }
