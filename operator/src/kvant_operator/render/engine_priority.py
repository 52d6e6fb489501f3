"""Whether an engine orders its own waiting queue by class: SGLang's priority scheduling.

It is `spec.serving.priorityScheduling` (unset: on). The gate writes every request's class into
SGLang's `priority` field (kvant_contracts.tenancy.ENGINE_PRIORITY); with priority scheduling the
engine orders its waiting queue by the same classes, without it first come, first served. Preemption
stays off in effect: the classes are at most 2 apart, under SGLang's
--priority-scheduling-preemption-threshold (10).

SGLang 0.5.23 asserts --schedule-policy fcfs (its default) or lof with priority scheduling, so an
engine whose engineArgs choose another policy keeps it and is not given priority scheduling, unless
the spec asks for both (which the API refuses).
Why, with the measurements: see docs/concepts/tenants.md ("The class in the engine").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from kvant_contracts.tenancy import ENGINE_PRIORITY

ENABLE: Final = "--enable-priority-scheduling"
DEFAULT_VALUE: Final = "--default-priority-value"
SCHEDULE_POLICY: Final = "--schedule-policy"
PRIORITY_POLICIES: Final = ("fcfs", "lof")


def schedule_policy(args: Sequence[str]) -> str | None:
    """The --schedule-policy that `args` choose (the last one, as argparse reads it), or None."""
    chosen = None
    for i, arg in enumerate(args):
        if arg.startswith(f"{SCHEDULE_POLICY}="):
            chosen = arg.split("=", 1)[1]
        elif arg == SCHEDULE_POLICY and i + 1 < len(args):
            chosen = args[i + 1]
    return chosen


def priority_flags(setting: bool | None, args: Sequence[str]) -> list[str]:
    """The flags Kvant puts before an engine's own `args`: priority scheduling unless `setting` is
    False, the args already turn it on, or (with `setting` unset) they choose a policy it cannot use.
    Requests carry their class always; the engine's own default for one without (none reaches it
    past the gate) is the standard class."""
    if setting is False or ENABLE in args:
        return []
    policy = schedule_policy(args)
    if setting is None and policy is not None and policy not in PRIORITY_POLICIES:
        return []
    flags = [ENABLE]
    if not any(a == DEFAULT_VALUE or a.startswith(f"{DEFAULT_VALUE}=") for a in args):
        flags.append(f"{DEFAULT_VALUE}={ENGINE_PRIORITY['standard']}")
    return flags
