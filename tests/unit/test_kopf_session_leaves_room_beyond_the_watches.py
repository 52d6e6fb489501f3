"""kopf's session is bounded (a first start with 1,000 models once opened 1,000 TLS connections), but a
watch stream holds its connection for as long as it runs: the bound must leave connections beyond
every watch, cluster-wide or in any number of namespaces, or every other request would wait forever."""

from __future__ import annotations

from kvant_operator.kopf_session import REQUESTS_IN_FLIGHT, WATCHED_KINDS, connection_limit


def test_the_bound_leaves_requests_room_beyond_every_watch_stream() -> None:
    assert connection_limit(0) >= WATCHED_KINDS + REQUESTS_IN_FLIGHT  # cluster-wide: one per kind
    for namespaces in (1, 3, 40):
        assert connection_limit(namespaces) >= WATCHED_KINDS * namespaces + REQUESTS_IN_FLIGHT
