"""Fields a newer CRD has and this operator does not know: the model serves on without them, said once.

An upgrade applies the CRD first, then the operator (CHANGELOG.md). In between, the API server shows
every model with the new CRD's defaults, so the running operator meets fields it has never heard of.
Its spec model refuses unknown fields (a typo in `kvant render -f` must fail), and an operator that
refused them here would mark every model InvalidSpec (Failed, Degraded) until its own upgrade: the
upgrade e2e saw exactly that from an earlier commit. The API server's structural schema has already
pruned whatever no CRD declares, so a field unknown here can only come from a newer CRD: the operator
reconciles what it knows, as the release it is, and says once per generation which fields it left
out, in a Warning event. The upgraded operator then builds them.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError

from kvant_contracts.kube_object import Obj
from kvant_operator.reconcile.state import Event

UNKNOWN_FIELD = "extra_forbidden"  # pydantic's error type for a field the model does not declare


def without_newer_fields(body: Obj, err: ValidationError) -> tuple[Obj, list[str]] | None:
    """`body` without the fields `err` found unknown, and their paths; None when `err` has any other
    error (then the spec is invalid, whatever the CRD's version)."""
    errors = err.errors()
    if not errors or any(e["type"] != UNKNOWN_FIELD for e in errors):
        return None
    known = copy.deepcopy(body)
    paths = []
    for e in errors:
        *parents, field = e["loc"]
        holder: Any = known  # dicts and, at an integer key, lists (a model inside a list)
        for key in parents:
            holder = holder[key]
        holder.pop(field, None)
        paths.append(".".join(str(part) for part in e["loc"]))
    return known, paths


def newer_fields_event(paths: list[str]) -> Event:
    return (
        "Warning",
        "UnknownFields",
        f"this operator does not know {', '.join(paths)} (a newer CRD's fields): it serves the model "
        "without them until the operator is upgraded to the CRD's release",
    )
