"""The simulated SGLang scheduler: a discrete-event core with no clock of its own.

`Engine.step(now)` runs one scheduler iteration the way SGLang's event loop
does: if waiting requests can be admitted it runs a prefill batch, otherwise
one decode step of the running batch. It returns what happened and how long
the step takes under the cost model. The HTTP server drives it in real time
(it sleeps for each step's duration); the benchmark drives it in virtual time
(it adds the duration to a counter). One engine model, two clocks.

KV accounting follows SGLang's token pool and scheduler (python/sglang/srt/managers/:
schedule_policy.py `PrefillAdder`, scheduler.py `update_running_batch`,
schedule_batch.py `retract_decode`):
- a running request holds `prompt + output` KV slots (the newest token's KV
  is written by the next decode step, which allocates one slot per request);
- admission is first-come first-served and stops at the first request that
  does not fit. A new request must fit its prompt plus its whole remaining
  output (clipped at `CLIP_MAX_NEW_TOKENS`) into the free KV, after each running
  request has reserved only `new_token_ratio` x its remaining output;
- a request that does not fit (or a batch at `max_running_requests`) marks the
  running batch full, and the scheduler tries no admission until a request
  leaves the batch, finished or retracted (SGLang's `batch_is_full`, scheduler.py
  `get_new_batch_prefill`); without it a waiting request got in as soon as the
  decaying ratio made room;
- a request that finishes holds its KV until the next step has been scheduled,
  and only then leaves the batch: SGLang's overlap loop (on by default, on
  the CPU backend too) schedules a step before it processes the previous
  one's results. A decode that would have to retract while such requests are
  about to leave waits for them instead (`update_running_batch` with
  finishing requests in flight);
- `new_token_ratio` is SGLang's guess of how much of `max_new_tokens` a request
  really generates. It starts at the configured initial ratio (SGLang: 0.7),
  falls linearly on every decode step that needs no retraction to
  initial x `MIN_NEW_TOKEN_RATIO_FACTOR` over `NEW_TOKEN_RATIO_DECAY_STEPS`
  steps, and returns to the initial ratio whenever the engine goes idle;
- when a decode step finds fewer free slots than running requests, requests
  are retracted, fewest generated tokens first, then longest prompt, until
  the survivors fit one more step: their KV is freed and they go to the back
  of the waiting queue. The ratio then jumps to what the survivors need:
  (their generated tokens + `RETRACT_DECODE_STEPS` per survivor) / their
  max_new_tokens, at most 1. Re-admission recomputes prefill over prompt +
  the tokens already generated (those tokens were sent and stay valid).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kvant_contracts import engine_scheduler
from kvant_runtime.sim.cost import CostModel
from kvant_runtime.sim.output_lengths import OutputLengths
from kvant_runtime.sim.text import VOCAB_SIZE

# SGLang's defaults (python/sglang/srt/environ.py), from the contract that names the knobs a model
# may set (kvant_contracts.engine_scheduler); EngineConfig takes the set ones.
INIT_NEW_TOKEN_RATIO = engine_scheduler.INIT_NEW_TOKEN_RATIO
MIN_NEW_TOKEN_RATIO_FACTOR = engine_scheduler.MIN_NEW_TOKEN_RATIO_FACTOR.default
NEW_TOKEN_RATIO_DECAY_STEPS = int(engine_scheduler.NEW_TOKEN_RATIO_DECAY_STEPS.default)
RETRACT_DECODE_STEPS = engine_scheduler.RETRACT_DECODE_STEPS
CLIP_MAX_NEW_TOKENS = int(engine_scheduler.CLIP_MAX_NEW_TOKENS.default)


@dataclass(frozen=True)
class EngineConfig:
    kv_tokens: int
    max_running_requests: int
    context_length: int
    max_prefill_tokens: int = 16384
    new_token_ratio: float = INIT_NEW_TOKEN_RATIO  # the initial ratio; see the module docstring
    min_new_token_ratio_factor: float = MIN_NEW_TOKEN_RATIO_FACTOR
    new_token_ratio_decay_steps: int = NEW_TOKEN_RATIO_DECAY_STEPS
    clip_max_new_tokens: int = CLIP_MAX_NEW_TOKENS
    seed: int = 0
    cost: CostModel = field(default_factory=CostModel)
    output_lengths: OutputLengths | None = None  # None: every request runs to its max_new_tokens
    adapter_slots: int | None = None  # --max-loras-per-batch: adapters per batch, base too; None: no LoRA


@dataclass(eq=False)
class Request:
    rid: str
    prompt_tokens: int
    max_new_tokens: int
    arrival: float
    rng: random.Random
    output_ids: list[int] = field(default_factory=list)
    kv_tokens: int = 0
    first_token_time: float | None = None
    finish_time: float | None = None
    retractions: int = 0
    aborted: bool = False
    natural_new_tokens: int | None = None  # where the model would emit EOS; None: never before the limit
    # Prefill/decode: a decode engine's request whose prompt KV came from its prefill by transfer, so
    # its first admission computes nothing (after a retraction it re-prefills like any other).
    kv_transferred: bool = False
    adapter: str | None = None  # the LoRA adapter it runs with; None: the base model

    @property
    def stopped(self) -> bool:
        """Finished at EOS, before its limit (finish_reason `stop`)."""
        natural = self.natural_new_tokens
        return natural is not None and natural < self.max_new_tokens and len(self.output_ids) >= natural

    @property
    def finished(self) -> bool:
        return len(self.output_ids) >= self.max_new_tokens or self.stopped or self.aborted

    @property
    def remaining_new_tokens(self) -> int:
        return self.max_new_tokens - len(self.output_ids)

    def estimated_new_tokens(self, clip: int) -> int:
        """The remaining output SGLang's admission plans for: clipped at `clip`, so one huge
        max_new_tokens does not block the queue."""
        return min(self.remaining_new_tokens, clip)


@dataclass
class StepResult:
    """One scheduler iteration; its events are visible at `end`."""

    kind: str  # "prefill" or "decode"
    end: float
    duration: float
    tokens: list[tuple[Request, int]] = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)
    retracted: list[Request] = field(default_factory=list)
    prefill_tokens: int = 0


class RequestRejected(ValueError):
    """A request the engine could never run; the message says why."""


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.used_kv_tokens = 0
        self.retracted_total = 0
        self.last_step_retractions = 0
        self.batch_is_full = False  # see the module docstring: no admission until a request leaves
        # Finished in the step just run; they hold their KV until the next step is scheduled (SGLang's
        # overlap loop processes a step's results while the next one runs).
        self.leaving: list[Request] = []
        self.new_token_ratio = config.new_token_ratio
        self.min_new_token_ratio = config.new_token_ratio * config.min_new_token_ratio_factor
        self.new_token_ratio_decay = (
            config.new_token_ratio - self.min_new_token_ratio
        ) / config.new_token_ratio_decay_steps

    @property
    def free_kv_tokens(self) -> int:
        return self.config.kv_tokens - self.used_kv_tokens

    @property
    def token_usage(self) -> float:
        return self.used_kv_tokens / self.config.kv_tokens

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running and not self.leaving

    def submit(
        self,
        rid: str,
        prompt_tokens: int,
        max_new_tokens: int,
        now: float,
        prompt_key: str,
        *,
        ignore_eos: bool = False,
        kv_transferred: bool = False,
        adapter: str | None = None,
    ) -> Request:
        """Queue a request; `prompt_key` seeds its output (and its natural length) so equal requests
        get equal text. Like SGLang, admission plans for `max_new_tokens`: it cannot know where EOS is."""
        self._check_fits(prompt_tokens, max_new_tokens)
        rng = random.Random(f"{self.config.seed}/{prompt_key}/{max_new_tokens}")
        lengths = self.config.output_lengths
        natural = None if ignore_eos or lengths is None else lengths.draw(rng)
        request = Request(
            rid,
            max(prompt_tokens, 1),
            max_new_tokens,
            now,
            rng,
            natural_new_tokens=natural,
            kv_transferred=kv_transferred,
            adapter=adapter,
        )
        self.waiting.append(request)
        return request

    def abort(self, request: Request) -> None:
        """Drop a request (its client went away), freeing its KV."""
        request.aborted = True
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self._release(request)
            self.running.remove(request)
            self.batch_is_full = False
        if request in self.leaving:
            self.leaving.remove(request)
            self._release(request)

    def step(self, now: float) -> StepResult | None:
        """Run one iteration starting at `now`; None when there is nothing to do."""
        self.last_step_retractions = 0
        admitted = self._admit()
        if admitted:
            self._release_leaving()
            return self._prefill(admitted, now)
        if self.running:
            return self._decode(now)
        if self.leaving:  # what finished last frees its KV, which may be what the waiting need
            self._release_leaving()
            return self.step(now)
        self.new_token_ratio = self.config.new_token_ratio  # SGLang: self_check_during_idle
        return None

    def _release_leaving(self) -> None:
        """The previous step's results are processed: its finished requests free their KV, and the
        batch they left is no longer full."""
        for request in self.leaving:
            self._release(request)
            self.batch_is_full = False
        self.leaving = []

    def _check_fits(self, prompt_tokens: int, max_new_tokens: int) -> None:
        total = prompt_tokens + max_new_tokens
        if total > self.config.context_length:
            raise RequestRejected(
                f"the request needs {prompt_tokens} prompt + {max_new_tokens} new tokens = {total}, "
                f"more than the context length {self.config.context_length}"
            )
        if total > self.config.kv_tokens:
            raise RequestRejected(
                f"the request needs {total} KV tokens, more than the whole KV cache "
                f"({self.config.kv_tokens} tokens)"
            )
        if max_new_tokens < 1:
            raise RequestRejected("the request must ask for at least 1 new token")

    def _admit(self) -> list[Request]:
        admitted: list[Request] = []
        if not self.running:
            self.batch_is_full = False  # SGLang: an empty batch has no request left to clear it
        if self.batch_is_full or not self.waiting:
            return admitted
        clip = self.config.clip_max_new_tokens
        reserved = self.new_token_ratio * sum(r.estimated_new_tokens(clip) for r in self.running)
        budget = self.free_kv_tokens - reserved
        prefill_tokens = 0
        # The batch's adapters and SGLang's slots for them (can_schedule_lora_req, no pinned adapters).
        adapters, slots, position = {r.adapter for r in self.running}, self.config.adapter_slots, 0
        while position < len(self.waiting):
            if len(self.running) >= self.config.max_running_requests:
                self.batch_is_full = True
                break
            request = self.waiting[position]
            if slots is not None and request.adapter not in adapters and len(adapters) >= slots:
                position += 1  # no slot for its adapter: it waits, and the next may run
                continue
            need = request.prompt_tokens + len(request.output_ids)
            if admitted and prefill_tokens + need > self.config.max_prefill_tokens:
                break  # the prefill batch is full, not the cache: next step tries again
            if need + request.estimated_new_tokens(clip) > budget:
                self.batch_is_full = bool(admitted or self.running)
                break
            self.waiting.pop(position)
            self.running.append(request)
            adapters.add(request.adapter)
            request.kv_tokens = need
            self.used_kv_tokens += need
            budget -= need + request.estimated_new_tokens(clip)
            prefill_tokens += need
            admitted.append(request)
        return admitted

    def _prefill(self, admitted: list[Request], now: float) -> StepResult:
        prefill_tokens = sum(r.kv_tokens for r in admitted if not r.kv_transferred)
        duration = self.config.cost.prefill_seconds(prefill_tokens)
        result = StepResult("prefill", now + duration, duration, prefill_tokens=prefill_tokens)
        for request in admitted:
            request.kv_transferred = False
            self._emit(request, result)
        return result

    def _decode(self, now: float) -> StepResult:
        # The previous step's finished requests free their KV before this decode needs room: SGLang
        # skips a decode rather than retract while such requests are in flight, and decodes a step
        # later (update_running_batch).
        self._release_leaving()
        retracted = self._retract_until_decode_fits()
        self._update_new_token_ratio(retracted)
        for request in self.running:
            request.kv_tokens += 1
        self.used_kv_tokens += len(self.running)
        context = sum(r.kv_tokens for r in self.running)
        duration = self.config.cost.decode_seconds(len(self.running), context)
        result = StepResult("decode", now + duration, duration, retracted=retracted)
        for request in list(self.running):
            self._emit(request, result)
        return result

    def _retract_until_decode_fits(self) -> list[Request]:
        retracted: list[Request] = []
        # Retract the request that lost least work: fewest tokens generated, then longest prompt.
        order = sorted(self.running, key=lambda r: (len(r.output_ids), -r.prompt_tokens), reverse=True)
        while self.free_kv_tokens < len(self.running) and len(self.running) > 1:
            victim = order.pop()
            self.running.remove(victim)
            self._release(victim)
            victim.retractions += 1
            retracted.append(victim)
            self.batch_is_full = False
        self.waiting.extend(retracted)  # SGLang: _extend_requests_to_queue, the back of the queue
        self.retracted_total += len(retracted)
        self.last_step_retractions = len(retracted)
        return retracted

    def _update_new_token_ratio(self, retracted: list[Request]) -> None:
        if not retracted:
            self.new_token_ratio = max(
                self.new_token_ratio - self.new_token_ratio_decay, self.min_new_token_ratio
            )
            return
        # Enough for the survivors' output so far plus RETRACT_DECODE_STEPS more each.
        decoded = sum(len(r.output_ids) for r in self.running)
        planned = sum(r.max_new_tokens for r in self.running)
        self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / (planned + 1))

    def _release(self, request: Request) -> None:
        self.used_kv_tokens -= request.kv_tokens
        request.kv_tokens = 0

    def _emit(self, request: Request, result: StepResult) -> None:
        token = request.rng.randrange(VOCAB_SIZE)
        request.output_ids.append(token)
        result.tokens.append((request, token))
        if request.first_token_time is None:
            request.first_token_time = result.end
        if request.finished:
            request.finish_time = result.end
            self.running.remove(request)
            self.leaving.append(request)
            result.finished.append(request)
