"""The HTTP connection protocol: uvicorn's h11 protocol with a deadline for request headers.

uvicorn bounds the idle time between requests (keep-alive) but not the time a client takes to
send a request's headers, so a client trickling one header byte a second (a "slowloris") could
hold a connection forever. Here every request's headers must be complete within
`header_timeout` seconds of the connection opening or of the request's first byte; a client
that is too slow gets 408 and the connection is closed. (The body has its own limit in
http_server.read_body.)
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

_TIMEOUT_BODY = b"the request headers came too slowly"
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY)
)


def header_timeout_protocol(header_timeout: float) -> type[H11Protocol]:
    """An h11 protocol class for uvicorn.Config(http=...) that enforces `header_timeout`."""

    class HeaderTimeoutProtocol(H11Protocol):
        deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            waiting = self.conn.their_state is h11.IDLE  # this data begins a new request
            if waiting and self.deadline is None:
                self._arm()
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the headers are complete
                self._disarm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self.deadline = self.loop.call_later(header_timeout, self._expired)

        def _disarm(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None

        def _expired(self) -> None:
            self.deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                logger.info(
                    "closed a connection from %s: no complete request headers in %.0f s",
                    self.client[0] if self.client else "?",
                    header_timeout,
                )
                self.transport.write(_TIMEOUT_RESPONSE)
                self.transport.close()

    return HeaderTimeoutProtocol
