"""HTTP connections whose client stops reading are cut, so unread answers cannot pile up.

An answer is handed to its connection whole, and the request ends there: its slot in the
concurrency limits is free again at once. What the client has not read yet waits in the
connection's send buffer. uvicorn has no send timeout, and closes an idle keep-alive connection
only once that buffer is flushed, so a client that never reads would keep each of its answers (up
to a page of ``limits.max_scan_limit`` values) in memory, and its connection open, for as long as it
stays connected, and would hold up a graceful shutdown too.

Here a connection whose send buffer stays full for ``limits.request_timeout_ms`` is aborted: the
client must read some of its answer within each such period (the time between two successful
sends, as nginx's ``send_timeout``, not the whole transfer, so a big answer over a slow link is
not cut while it moves).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.settings import LimitSettings

logger = logging.getLogger(__name__)


class SendTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, aborting a connection whose writes stay paused too long.

    The transport pauses writing when its buffer passes the high-water mark and resumes it when the
    client has read enough. Only these asyncio protocol callbacks are hooked, none of uvicorn's own.
    """

    send_timeout_seconds: float = 30.0
    _stall: asyncio.TimerHandle | None = None
    _transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._transport = transport
        super().connection_made(transport)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall is None:
            self._stall = asyncio.get_running_loop().call_later(self.send_timeout_seconds, self._abort)

    def resume_writing(self) -> None:
        self._cancel_stall()
        super().resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_stall()
        super().connection_lost(exc)

    def _cancel_stall(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _abort(self) -> None:
        """Drop the connection, also one already closing (a closed connection waits for its buffer)."""
        self._stall = None
        transport = self._transport
        if transport is None:
            return
        peer = transport.get_extra_info("peername")
        address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "an unknown client"
        logger.warning(
            "closed the connection of %s: its client did not read its answer for %g s"
            " (limits.request_timeout_ms); %d bytes were still unsent",
            address,
            self.send_timeout_seconds,
            transport.get_write_buffer_size(),
        )
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Linger 0: the kernel drops what it still holds and resets, rather than keeping an
            # orphaned socket with a full send queue until its retries run out.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()


def http_protocol(limits: LimitSettings) -> type[asyncio.Protocol]:
    """The protocol class ``uvicorn`` serves HTTP with (its ``http`` setting), cutting stalled sends
    after ``limits.request_timeout_ms``."""
    return type(
        "SendTimeoutProtocol",
        (SendTimeoutProtocol,),
        {"send_timeout_seconds": limits.request_timeout_ms / 1000},
    )
