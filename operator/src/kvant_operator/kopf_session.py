"""kopf's HTTP session, with a bound on its connections.

kopf's own session opens as many connections as it has requests in flight (aiohttp's `limit=0`). On
a first start with 1,000 new models, kopf adds its finalizer to every one at once: 1,000 TLS
connections, each with asyncio's 256 KiB SSL buffer. Measured at 1,000 models, the operator's RSS went
from 102 to 421 MiB in the first 9 s, and glibc kept it. This login keeps kopf's (the kubernetes
client's configuration) and bounds the connections.

A watch stream holds its connection for as long as it runs, so the bound is the watch streams plus
the requests that may be in flight: a bound at or below the watches alone would leave none for the
rest, and every other request would wait forever.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import kopf

from kvant_operator.kube_cache import SERVING_KINDS

WATCHED_KINDS = 2 + len(SERVING_KINDS)  # QuantizedModels and pods, and each serving kind
OTHER_WATCHES = 4  # kopf's own: CRDs, namespaces, peering
REQUESTS_IN_FLIGHT = 32  # finalizers, peering keep-alives: kopf waits for a connection past these


def connection_limit(namespaces: int) -> int:
    """Connections for `namespaces` watched namespaces (0: cluster-wide, one stream per kind)."""
    return WATCHED_KINDS * max(1, namespaces) + OTHER_WATCHES + REQUESTS_IN_FLIGHT


@kopf.on.login()
async def login(memo: kopf.Memo, **kwargs: Any) -> kopf.AiohttpSession | None:
    info = kopf.login_via_client(**kwargs)
    if info is None:
        return None
    # As kopf builds its own session (kopf/_cogs/clients/auth.py), with a limit.
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=connection_limit(int(memo.get("watched_namespaces", 0))), ssl=info.as_ssl_context()
        ),
        headers=info.as_http_headers(),
        auth=info.as_aiohttp_basic_auth(),
        proxy=info.proxy_url,
        trust_env=info.trust_env,
    )
    return kopf.AiohttpSession(
        aiohttp_session=session,
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
    )
