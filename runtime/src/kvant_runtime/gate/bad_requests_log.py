"""One line, not a traceback, for a request the HTTP parser refused.

aiohttp answers a request it cannot parse with 400 and logs the parser's exception with its traceback
at ERROR ("Error handling request"). Some are routine: smg 1.13 tries each new worker over gRPC as
well as HTTP, and its HTTP/2 preface ("PRI * HTTP/2.0") reaches the gate as such a request once per
engine pod. Nothing in the gate failed, so the gate logs what came and from where, as a warning
(`event=bad_http_request`), and keeps tracebacks for its own faults.
"""

from __future__ import annotations

import logging

from aiohttp import http_exceptions

AIOHTTP_SERVER_LOGGER = "aiohttp.server"


class OneLineBadRequests(logging.Filter):
    """Rewrites aiohttp's record of an unparsable request as one line at WARNING."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, http_exceptions.HttpProcessingError):
            what = record.getMessage()
            said = str(error.message).strip()  # its first line names what the parser met
            first = said.splitlines()[0] if said else type(error).__name__
            record.msg = "event=bad_http_request what=%r error=%r answered=400"
            record.args = (what, first)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        return True


def install() -> None:
    logging.getLogger(AIOHTTP_SERVER_LOGGER).addFilter(OneLineBadRequests())
