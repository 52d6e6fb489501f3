"""Integration fixtures: the models a module makes are deleted when it ends (qm_crd.remove_models)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration import qm_crd


@pytest.fixture(autouse=True, scope="module")
def models_removed_after_module(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if qm_crd.namespaces_made:
        qm_crd.remove_models(request.getfixturevalue("apiserver"))
