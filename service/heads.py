"""Request heads bounded in bytes, refused with a problem document before anything reads them.

uvicorn bounds a request head in time only (``service.connections``): a client could stream a
head of hundreds of megabytes within the head timeout, all buffered before the application sees
it (before any auth check), stalling every other client while it is parsed. Here the bytes of a
request head (request line and headers, as sent) are counted as they arrive, before the parser
gets them: at ``limits.max_request_head_bytes`` the head is refused with ``431
request-head-too-large`` and the connection closed, so a head never holds more than that bound;
a request target (path and query) above ``limits.max_url_bytes`` gets ``414 uri-too-long``. Both
answers are problem documents like every other refusal, written by the protocol itself (no
request reached the application), with ``connection: close``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from service.problems import problem_body
from wire.problems import REQUEST_HEAD_TOO_LARGE, URI_TOO_LONG, ProblemError

logger = logging.getLogger("service.connections")

_INSTANCE_CHARS = 200  # of a refused target echoed as the problem's ``instance``


def raw_problem(problem: ProblemError, instance: str) -> bytes:
    """A whole HTTP/1.1 answer holding ``problem``, closing the connection."""
    body, headers = problem_body(problem, instance)
    lines = [STATUS_LINE[problem.status]]
    lines += [f"{name}: {value}\r\n".encode("latin-1") for name, value in headers.items()]
    lines += [b"connection: close\r\n\r\n", body]
    return b"".join(lines)


class BoundedHeads(HttpToolsProtocol):
    """uvicorn's httptools protocol, counting each request head's bytes before parsing them.

    A head is open from a connection's start, and again after each request's end, until its
    headers are complete; the bytes fed meanwhile count. Data larger than the room left is fed
    in two parts, so a head is refused as soon as its bytes pass the bound. (The head of a request
    pipelined behind another in one read is counted from the next read: the parser does not say
    where in a read a request ended, so it may hold up to one read more than the bound.)
    """

    max_head_bytes: int = 64 * 1024
    max_url_bytes: int = 32 * 1024
    _head_bytes: int = 0
    _head_open: bool = True
    _heads_done: int = 0
    _refused: bool = False

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._head_open:
            super().data_received(data)
            return
        room = self.max_head_bytes - self._head_bytes
        if len(data) <= room:  # the usual case: the whole head (or what is left of it) in one read
            self._head_bytes += len(data)
            super().data_received(data)
            if self._head_open and self._head_bytes >= self.max_head_bytes:
                self._refuse_head()
            return
        self._head_bytes += room
        done = self._heads_done
        super().data_received(data[:room])
        if self._heads_done == done:
            self._refuse_head()
        elif not self._refused and not self.transport.is_closing():
            self.data_received(data[room:])  # the head ended within the room: the rest is body

    def on_headers_complete(self) -> None:
        if self._refused:  # a request pipelined behind a refused one is not served
            return
        self._head_open = False
        self._heads_done += 1
        if len(self.url) > self.max_url_bytes:
            self._refuse(self._uri_too_long())
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._head_open = True
        self._head_bytes = 0
        super().on_message_complete()

    def _refuse_head(self) -> None:
        if len(self._target()) > self.max_url_bytes:
            self._refuse(self._uri_too_long())
            return
        self._refuse(
            REQUEST_HEAD_TOO_LARGE(
                f"the request line and headers passed {self.max_head_bytes} bytes"
                " (limits.max_request_head_bytes); send shorter headers (a long value belongs in the body"
                " of a batch request)",
                extras={"limit": self.max_head_bytes},
            )
        )

    def _uri_too_long(self) -> ProblemError:
        return URI_TOO_LONG(
            f"the request target has {len(self._target())}{'+' if self._head_open else ''} bytes, more than"
            f" {self.max_url_bytes} (limits.max_url_bytes); send many keys as a batch (POST"
            " .../keys:batchGet) rather than in the URL",
            extras={"limit": self.max_url_bytes},
        )

    def log_refusal(self, address: str, problem: ProblemError) -> None:
        """Say that the head of a request from ``address`` was refused with ``problem``."""
        logger.warning(
            "answered %s %s to %s and closed the connection", problem.status, problem.slug, address
        )

    def _target(self) -> bytes:
        """The request target received so far (none before the request's first byte)."""
        return getattr(self, "url", b"")

    def _refuse(self, problem: ProblemError) -> None:
        """Answer ``problem`` and close, reading nothing more of this connection."""
        self._refused = True
        transport: asyncio.Transport = self.transport
        if transport.is_closing():  # the parser refused it already (uvicorn answered 400)
            return
        peer: Any = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) else "an unknown client"
        self.log_refusal(address, problem)
        path = self._target().split(b"?", 1)[0][:_INSTANCE_CHARS].decode("latin-1")
        transport.write(raw_problem(problem, path if path.startswith("/") else "/"))
        transport.close()
