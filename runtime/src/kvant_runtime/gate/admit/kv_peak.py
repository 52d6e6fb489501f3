"""`engine` admission: nothing is let through that could make the engine's cache overflow later, with
each request counted as it really grows (until it ends), not as its whole limit held at once.

A running request holds its prompt plus what it has generated, grows by one token a decode step, and
frees everything when it ends; so the cache's future peak comes just before some request ends, and it
is below the sum of every request's whole limit by what the requests ending earlier give back. This is
how SGLang itself admits requests that ignore EOS (`PrefillAdder.add_one_req_ignore_eos`); for the
rest SGLang reserves only `new_token_ratio` (0.7 decaying to 0.1) of what its running requests may
still write, and that optimism is what makes it retract. Counting to each request's limit, this check
keeps a full cache from overflowing whatever the answers' lengths, while the engine keeps its own
exact page accounting for what it admits.

What the gate knows of each request it has in flight: its prompt, its output limit and when it was
let through. What the engine reports (`/v1/loads`): how many run and the tokens they hold, as of when
it published that. The tokens held less their prompts is what the running requests have generated
together; it is shared among them by age (the oldest began first). Requests let through after the
snapshot, or beyond the count it reports running, count as not started. A snapshot published before
the gate last got a request back is waited out (`engine_snapshot`), except by a gate without a
waiting room, which decides on it: the released request's tokens then read as the others' progress,
an error of at most that request's size. A request that starts in the engine later than assumed does
not, nor does the decode step's own token; the check keeps the prompt estimate's headroom
(`kvant_runtime.tokens.ESTIMATE_HEADROOM`) of the cache free for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kvant_runtime.gate.admit.check import Check
from kvant_runtime.gate.admit.claims import Ticket
from kvant_runtime.gate.engine_load import EngineLoad
from kvant_runtime.tokens import ESTIMATE_HEADROOM

# (KV tokens held now, decode steps it may still run, tokens it adds a step: its sequences)
Growth = tuple[int, int, int]


def blocks(check: Check) -> bool:
    if check.limits.admission != "engine":
        return False
    load = check.room.fresh_engine(check.now)
    if load is None or not check.held.tickets:  # engine_queue decides on a missing snapshot
        return False
    growths = in_flight_growth(check.held.tickets, load, check.now)
    growths.append(_not_started(check.tokens, check.output_tokens, check.sequences))
    # The headroom covers what the model of the future leaves out: a request that starts in the engine
    # a few steps after the gate assumed, the decode step's token per request, page rounding.
    return future_peak(growths) > check.share * (1.0 - ESTIMATE_HEADROOM) * load.capacity


def in_flight_growth(tickets: Sequence[Ticket], load: EngineLoad, now: float) -> list[Growth]:
    """Each in-flight request's KV now, the decode steps it may still run and its sequences. The
    engine runs the oldest first, and counts each sequence of a request (`n`, a batch) as a request."""
    running: list[Ticket] = []
    sequences = 0
    for ticket in tickets:
        if sequences >= load.running or ticket.granted_at > load.as_of:
            break
        running.append(ticket)
        sequences += ticket.sequences
    prompts = [t.tokens - t.output_tokens for t in running]
    generated = max(0, load.used_tokens - sum(prompts))
    ages = [max(0.0, now - t.granted_at) * t.sequences for t in running]
    total_age = sum(ages)
    growths: list[Growth] = []
    for ticket, prompt, age in zip(running, prompts, ages, strict=True):
        share = generated * age / total_age if total_age > 0 else generated / len(running)
        done = min(ticket.output_tokens, int(share))
        steps = -(-(ticket.output_tokens - done) // ticket.sequences)
        growths.append((prompt + done, steps, ticket.sequences))
    growths += [_not_started(t.tokens, t.output_tokens, t.sequences) for t in tickets[len(running) :]]
    return growths


def _not_started(tokens: int, output: int, sequences: int) -> Growth:
    per_sequence = -(-output // max(1, sequences))
    return (tokens - output, per_sequence, max(1, sequences))


def future_peak(growths: Iterable[Growth]) -> int:
    """The most KV the requests will hold at once from now on, each growing by its sequences a step
    until it has run its steps, then freeing all it held."""
    peak = rate = held = 0
    for now_held, steps, sequences in sorted(growths, key=lambda g: g[1], reverse=True):
        rate += sequences
        held += now_held
        # Just before the requests with this many steps left end (those with more are alive too).
        peak = max(peak, held + rate * max(0, steps - 1))
    return peak
