"""Which source's limits are in force: the API while its watch is live; the file's changes while it
is not, unless the file is only catching up with what the API already delivered."""

from __future__ import annotations

from kvant_runtime.gate.limits_source import LimitsArbiter, LimitsText

A, B, C = b"maxConcurrency: 1", b"maxConcurrency: 2", b"maxConcurrency: 3"


def api(content: bytes | None) -> LimitsText:
    return LimitsText("api", "ConfigMap serving/tiny-limits", content, "" if content else "unreachable")


def file(content: bytes | None) -> LimitsText:
    return LimitsText("file", "/etc/kvant/limits/limits.yaml", content, "" if content else "cannot read")


def test_with_the_api_live_its_content_wins_and_file_changes_are_only_followed() -> None:
    arbiter = LimitsArbiter(A)
    assert arbiter.offer(api(B)) == api(B)
    assert arbiter.offer(file(C)) is None  # an edit made before the watch started, projected late
    assert arbiter.offer(file(B)) is None
    assert arbiter.offer(file(None)) is None  # the file is only the fallback
    assert arbiter.offer(api(C)) == api(C)


def test_with_the_api_lost_a_lagging_file_is_ignored_and_a_new_edit_applies() -> None:
    arbiter = LimitsArbiter(A)
    arbiter.offer(api(B))
    arbiter.offer(api(C))
    assert arbiter.offer(api(None)) is None
    assert arbiter.offer(file(B)) is None  # the projection catching up: older than C, in force
    assert arbiter.offer(file(C)) is None  # caught up
    assert arbiter.offer(file(A)) == file(A)  # never delivered since: an edit made while the API was lost
    assert arbiter.offer(api(A)) == api(A)  # the API back: its content is in force again


def test_an_edit_back_to_an_earlier_content_while_the_api_is_lost_applies() -> None:
    arbiter = LimitsArbiter(A)
    arbiter.offer(api(A))
    arbiter.offer(api(B))
    arbiter.offer(api(None))
    assert arbiter.offer(file(B)) is None
    assert arbiter.offer(file(A)) == file(A)  # A after B: an edit back, not a projection of the old A


def test_without_api_access_every_file_change_applies_and_problems_are_reported() -> None:
    arbiter = LimitsArbiter(A)
    assert arbiter.offer(file(B)) == file(B)
    assert arbiter.offer(file(B)) is None
    assert arbiter.offer(file(None)) == file(None)
    assert arbiter.offer(file(A)) == file(A)


def test_a_file_that_already_shows_the_apis_content_is_in_step_with_it() -> None:
    arbiter = LimitsArbiter(A)
    arbiter.offer(api(A))
    arbiter.offer(api(B))
    arbiter.offer(api(None))
    assert arbiter.offer(file(B)) is None
    assert arbiter.offer(file(C)) == file(C)
