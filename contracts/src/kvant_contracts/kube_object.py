"""A Kubernetes object, or any part of one, as the JSON dict the API server sends and takes: the one
alias the operator, the local cluster, the tests and the benches write their objects with."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
