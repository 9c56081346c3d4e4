"""HTTP connections that must deliver their request in time: a slow or stalled client cannot hold one open.

uvicorn waits without end for a request's headers and for a body shorter than its declared length, so a
hundred clients that send half a request each hold a hundred connections for as long as they like (and a
few thousand exhaust the process's files). `request_deadline_protocol(seconds)` is uvicorn's own HTTP
protocol (httptools', else h11's) with one more rule: a request must arrive whole, headers and body,
within `seconds` of its first byte (of the connection, for the first request); a connection whose request
has not is closed. An idle connection between requests is left to uvicorn's keep-alive timeout.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("kbert.serve")


def request_deadline_protocol(seconds: float):
    """uvicorn's HTTP protocol class, closing a connection whose request has not arrived whole within
    `seconds` (uvicorn's `Config(http=...)`)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class RequestDeadline(AutoHTTPProtocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._deadline = None
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._deadline is None and not self._in_request():  # a new request's first bytes
                self._arm()
            super().data_received(data)
            if self._arrived():
                self._disarm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _in_request(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _arrived(self) -> bool:
            return self._in_request() and not self.cycle.more_body

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self._arrived() or self.transport.is_closing():
                return
            client = "%s:%d" % self.client if self.client else "-"
            logger.info("%s: closed: its request did not arrive whole within %g s (--request-timeout-s)",
                        client, seconds)
            self.transport.close()

    return RequestDeadline
