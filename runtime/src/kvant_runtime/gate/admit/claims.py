"""What a request asks of admission, what it holds once granted, and the one in-flight account.

A `Waiter` is built once, at the door, and carries the request from there to its `Ticket`: the
future it waits on resolves to the ticket itself, so a woken request already holds its slot.
`Held` is the only place in-flight work is counted; `Admission._grant` adds to it, `release`
takes away.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from kvant_contracts.tenancy import DEFAULT_TENANT, Priority


@dataclass(frozen=True, eq=False)  # identity: two grants of the same size are two requests
class Ticket:
    """A granted slot. Hand it back with `Admission.release` exactly once."""

    tokens: int
    waited_seconds: float
    over_limits: tuple[str, ...] = ()  # observe mode: the limits enforce would have waited for
    sequences: int = 1
    tenant: str = DEFAULT_TENANT
    priority: Priority = "standard"  # the class it was admitted in
    output_tokens: int = 0  # of `tokens`, the reserved output (the rest is prompt)
    granted_at: float = 0.0  # on the admission's clock


@dataclass(eq=False)  # identity: two waiters for the same tokens are different requests
class Waiter:
    tokens: int  # what it reserves (prompt plus its output reservation)
    sequences: int
    future: asyncio.Future[Ticket]
    tenant: str
    explicit: Priority | None  # the class the request named (key or trusted header); None: the limits'
    priority: Priority  # the class in force, re-resolved when the limits change
    output_tokens: int  # of `tokens`, the reserved output (charged outputTokenWeight in fair share)
    arrival: int  # a sequence number: ties in the queue order go to the earlier arrival
    enqueued_at: float
    deadline: float  # on the admission's clock

    def ticket(self, now: float, over: tuple[str, ...] = ()) -> Ticket:
        waited = now - self.enqueued_at
        return Ticket(
            self.tokens, waited, over, self.sequences, self.tenant, self.priority, self.output_tokens, now
        )


@dataclass
class Held:
    """What the gate has let through and not yet had back: requests, reserved tokens, sequences,
    and critical requests (the critical reserve holds room while any run)."""

    requests: int = 0
    tokens: int = 0
    sequences: int = 0
    critical: int = 0
    tickets: list[Ticket] = field(default_factory=list)  # in the order granted
    last_release: float = float("-inf")  # when a ticket was last given back, on the admission's clock

    def take(self, ticket: Ticket) -> None:
        self.tickets.append(ticket)
        self.requests += 1
        self.tokens += ticket.tokens
        self.sequences += ticket.sequences
        self.critical += ticket.priority == "critical"

    def give(self, ticket: Ticket, now: float) -> None:
        self.last_release = now
        for index, held in enumerate(self.tickets):
            if held is ticket:
                del self.tickets[index]
                break
        self.requests -= 1
        self.tokens -= ticket.tokens
        self.sequences -= ticket.sequences
        self.critical -= ticket.priority == "critical"
