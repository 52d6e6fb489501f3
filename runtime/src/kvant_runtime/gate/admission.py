"""Admission: who may run now, who waits, who is turned away. Pure logic, no HTTP.

A request costs `tokens`, what it reserves: its estimated prompt plus, per sequence, its output
limit (`admission: worstCase`) or the forecast of its output (`forecast`, see `forecast`).
In `enforce` mode it runs when both hold:
- in-flight requests < the effective concurrency;
- in-flight tokens + its tokens + `margin(sequences in flight with it)` ≤ the token budget (the
  margin is the forecast's allowance for the in-flight total's spread; 0 in worstCase): the
  engine's max_total_num_tokens less
  `ESTIMATE_HEADROOM` for the prompt estimate's error (kvant_runtime.tokens). With worst-case
  reservations each request reserves more than the engine ever holds for it, so requests that
  fit the budget together can never make the engine retract; forecast reservations trade that
  bound for admitting what answers that end early really take. (`targetTokenUsage` is the local
  loop's target for the engine's live token_usage, see `concurrency`, not a cap on
  reservations.) A request whose worst case is larger than the whole budget is refused with
  413, or with `oversizeRequests: runAlone` runs alone, so it is never starved. While the
  engine's capacity is unknown (and no planned capacity was given) the token check is skipped.

Otherwise it waits in a bounded FIFO queue, at most `queueTimeoutSeconds`. Strict FIFO:
a large request at the head is not overtaken by smaller ones behind it.
`observe` admits everything and reports which limit it would have waited for; `off` admits
everything. In-flight counts are kept in every mode, so switching modes is seamless.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kvant_contracts.limits import Limits
from kvant_runtime.tokens import ESTIMATE_HEADROOM


class Rejected(Exception):
    """Turned away: `reason` is the metric label, `retry_after` the seconds to tell the client."""

    def __init__(self, reason: str, retry_after: int | None, message: str, status: int = 429) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after
        self.status = status


@dataclass(frozen=True)
class Ticket:
    """A granted slot. Hand it back with `Admission.release` exactly once."""

    tokens: int
    waited_seconds: float
    over_limits: tuple[str, ...] = ()  # observe mode: the limits enforce would have waited for
    sequences: int = 1


@dataclass(eq=False)  # identity: two waiters for the same tokens are different requests
class _Waiter:
    tokens: int
    sequences: int
    future: asyncio.Future[None]
    enqueued_at: float = field(default_factory=time.monotonic)


class Admission:
    """The gate's admission state: limits, effective concurrency, token capacity, queue."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.concurrency = limits.concurrency_ceiling
        self.token_capacity: int | None = None
        self.in_flight = 0
        self.in_flight_tokens = 0
        self.in_flight_sequences = 0
        # Tokens kept free on top of the reservations for n sequences in flight (forecast admission).
        self.margin: Callable[[int], int] = lambda _sequences: 0
        self._queue: collections.deque[_Waiter] = collections.deque()

    @property
    def queue_length(self) -> int:
        return len(self._queue)

    @property
    def queued_tokens(self) -> int:
        return sum(waiter.tokens for waiter in self._queue)

    @property
    def demand(self) -> float:
        """What this replica is asked to hold over what it may hold now (kvant_contracts.autoscaling):
        the larger of the tokens and the requests held and waiting, over the token budget and over the
        effective concurrency. Over the effective concurrency, not the configured one, so a replica
        whose local loop narrowed it shows more demand and the autoscaler adds replicas."""
        requests = (self.in_flight + self.queue_length) / max(self.concurrency, 1)
        budget = self.token_budget
        if budget is None or budget <= 0:  # capacity unknown: requests are the only measure
            return requests
        return max(requests, (self.in_flight_tokens + self.queued_tokens) / budget)

    @property
    def token_budget(self) -> int | None:
        """The most tokens in flight at once, or None while the engine's capacity is unknown."""
        if self.token_capacity is None:
            return None
        return int((1.0 - ESTIMATE_HEADROOM) * self.token_capacity)

    def set_limits(self, limits: Limits) -> None:
        """New limits; the effective concurrency is the local loop's to set (`set_concurrency`)."""
        self.limits = limits
        self._dispatch()

    def set_concurrency(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._dispatch()

    def set_token_capacity(self, capacity: int | None) -> None:
        self.token_capacity = capacity
        self._dispatch()

    async def acquire(self, tokens: int, worst_case: int | None = None, sequences: int = 1) -> Ticket:
        """Waits for a slot for a request of `sequences` reserving `tokens` (at most `worst_case`, by
        default the same); raises `Rejected` when the queue is full, the wait times out, or even the
        worst case could never fit the whole budget."""
        worst = tokens if worst_case is None else worst_case
        if self.limits.mode != "enforce":
            over = self._over_limits(tokens, sequences) if self.limits.mode == "observe" else ()
            self._take(tokens, sequences)
            return Ticket(tokens, 0.0, over, sequences)
        budget = self.token_budget
        if budget is not None and worst > budget and self.limits.oversizeRequests == "refuse":
            raise Rejected(
                "too_large",
                None,
                f"the request may hold {worst} KV tokens, more than this replica's whole budget of "
                f"{budget}; shorten the prompt or lower max_tokens (or set "
                "spec.limits.oversizeRequests: runAlone)",
                status=413,
            )
        if not self._queue and not self._over_limits(tokens, sequences):
            self._take(tokens, sequences)
            return Ticket(tokens, 0.0, sequences=sequences)
        if len(self._queue) >= self.limits.maxQueued:
            raise Rejected(
                "queue_full",
                self.limits.retryAfterSeconds,
                f"the gate's queue is full ({len(self._queue)} waiting, maxQueued={self.limits.maxQueued})",
            )
        return await self._wait(tokens, sequences)

    def release(self, ticket: Ticket) -> None:
        self.in_flight -= 1
        self.in_flight_tokens -= ticket.tokens
        self.in_flight_sequences -= ticket.sequences
        self._dispatch()

    async def _wait(self, tokens: int, sequences: int) -> Ticket:
        waiter = _Waiter(tokens, sequences, asyncio.get_running_loop().create_future())
        self._queue.append(waiter)
        timeout = self.limits.queueTimeoutSeconds
        try:
            async with asyncio.timeout(timeout):
                await waiter.future
        except TimeoutError:
            if not _granted(waiter):
                self._forget(waiter)
                raise Rejected(
                    "queue_timeout",
                    self.limits.retryAfterSeconds,
                    f"no slot within queueTimeoutSeconds={timeout:g} "
                    f"(in flight: {self.in_flight} requests, {self.in_flight_tokens} tokens)",
                ) from None
        except asyncio.CancelledError:
            # The client went away: give back whatever it held or was about to get.
            if _granted(waiter):
                self.release(Ticket(tokens, 0.0, sequences=sequences))
            else:
                self._forget(waiter)
            raise
        return Ticket(tokens, time.monotonic() - waiter.enqueued_at, sequences=sequences)

    def _over_limits(self, tokens: int, sequences: int) -> tuple[str, ...]:
        over: list[str] = []
        if self.in_flight >= self.concurrency:
            over.append("concurrency")
        budget = self.token_budget
        if budget is not None and self.in_flight > 0:
            margin = self.margin(self.in_flight_sequences + sequences)
            if self.in_flight_tokens + tokens + margin > budget:
                over.append("token_budget")
        return tuple(over)

    def _take(self, tokens: int, sequences: int) -> None:
        self.in_flight += 1
        self.in_flight_tokens += tokens
        self.in_flight_sequences += sequences

    def _dispatch(self) -> None:
        """Grants waiting requests from the head of the queue while they fit."""
        while self._queue:
            head = self._queue[0]
            if self.limits.mode == "enforce" and self._over_limits(head.tokens, head.sequences):
                return
            self._queue.popleft()
            if not head.future.done():
                self._take(head.tokens, head.sequences)
                head.future.set_result(None)

    def _forget(self, waiter: _Waiter) -> None:
        if waiter in self._queue:
            self._queue.remove(waiter)
        # The head may have been the one blocking the rest.
        self._dispatch()


def _granted(waiter: _Waiter) -> bool:
    return waiter.future.done() and not waiter.future.cancelled()
