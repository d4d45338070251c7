"""HTTP connections that cannot hold the service's sockets or memory: bounded in time and number.

uvicorn keeps a connection for as long as its client keeps it, except an idle keep-alive one. So
a client could hold sockets (and, with a low descriptor limit, make the service unreachable) by
opening connections and sending nothing, or part of a request head; and a client that never
reads its answers would keep each one in memory. Here, per connection:

- its request head (request line and headers) must be complete within
  ``limits.request_head_timeout_ms`` of the connection's opening, or of the first byte of the
  next request on it; else the connection is closed (``nginx``'s ``client_header_timeout``);
- with no request in progress it stays open ``limits.idle_connection_timeout_ms`` (keep-alive);
- its client must read some of its answer within each ``limits.request_timeout_ms`` (the time
  between two successful sends, as ``nginx``'s ``send_timeout``, not the whole transfer, so a big
  answer over a slow link is not cut while it moves); else it is aborted, unsent bytes dropped;
- one address has at most ``limits.max_connections_per_client`` connections open: more are
  answered ``503 client-too-many-connections`` (with ``Retry-After``) and closed as soon as they
  open (``nginx``'s ``limit_conn``), so one host cannot take every socket;
- its request heads are bounded in bytes too (``service.heads``).

Body reads are bounded by the request deadline (``service.guard``). Proxy headers
(``X-Forwarded-For``) are believed only from the addresses ``http.forwarded_allow_ips`` names.

With TLS (``http.tls``) the protocol does the handshake itself, on the connection it counted, so
the bounds above hold from the moment a connection is accepted: the head deadline covers the
handshake too, and a connection over its address's limit is closed before any handshake (with no
503: answering would take the handshake the limit is there to spare). Request heads are bounded
in bytes over TLS as over plain HTTP, counting the decrypted bytes. (A listener given to uvicorn
with its own TLS would show a connection only once the handshake completed, leaving silent ones
uncounted until the handshake timeout.) The verified client certificate, if any, reaches every
request's scope (``service.tls.PEER_SCOPE_KEY``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import struct
import sys
from asyncio import sslproto
from typing import Any

from service.auth import CONNECTION_SCOPE_KEY
from service.heads import BoundedHeads, raw_problem
from service.limit_settings import LimitSettings
from service.reloading import Reloading
from service.settings import Settings
from service.throttled_log import ThrottledWarnings
from service.tls import PEER_SCOPE_KEY, PeerCertificate, peer_certificate, reloading_context
from wire.problems import CLIENT_TOO_MANY_CONNECTIONS, ProblemError

logger = logging.getLogger(__name__)


class ConnectionCounts:
    """Open connections per client address, for one server; and the warnings about full ones."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: dict[str, int] = {}
        self.full = ThrottledWarnings(logger)  # addresses whose new connections were closed
        self.slow = ThrottledWarnings(logger)  # addresses whose request heads did not come in time
        self.refused = ThrottledWarnings(logger)  # addresses whose TLS handshakes failed
        self.oversized = ThrottledWarnings(logger)  # addresses whose request heads were too large

    def admit(self, address: str) -> bool:
        """Count a new connection of ``address``; ``False`` (uncounted) when it has its limit open."""
        held = self.open.get(address, 0)
        if held >= self.limit:
            self.full.warn(
                address,
                "refused a new connection of %s and closed it: it has %d open,"
                " limits.max_connections_per_client (it should reuse its connections; behind a proxy that"
                " hides addresses, raise the limit)",
                address,
                held,
            )
            return False
        self.open[address] = held + 1
        return True

    def release(self, address: str) -> None:
        held = self.open[address] - 1
        if held:
            self.open[address] = held
        else:
            del self.open[address]
            self.full.forget(address)
            self.slow.forget(address)
            self.refused.forget(address)
            self.oversized.forget(address)


class _Handshaking(asyncio.Protocol):
    """The first protocol over a TLS connection: it hands the connection to ``owner`` when the
    handshake completes, before the TLS layer passes anything on."""

    def __init__(self, owner: GuardedProtocol) -> None:
        self.owner = owner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.owner.secured(transport)  # type: ignore[arg-type]


def _tls_layer(loop: asyncio.AbstractEventLoop) -> Any:
    """The class of the TLS layer ``loop.start_tls`` would insert: uvloop's own, else asyncio's.

    Used directly so the layer takes over the connection within ``connection_made``: any later
    (``start_tls`` runs on a later turn of the loop) and the client's first bytes could reach the
    HTTP parser.
    """
    uvloop_layer = getattr(sys.modules.get("uvloop.loop"), "SSLProtocol", None)
    uvloop_class = getattr(sys.modules.get("uvloop"), "Loop", None)
    if uvloop_layer is not None and uvloop_class is not None and isinstance(loop, uvloop_class):
        return uvloop_layer
    return sslproto.SSLProtocol


class GuardedProtocol(BoundedHeads):
    """uvicorn's httptools protocol with the bounds above (see the module's docstring).

    Besides asyncio's protocol callbacks, only the parser callbacks that start and end a request
    head are hooked (each calls uvicorn's own first).
    """

    send_timeout_seconds: float = 30.0
    head_timeout_seconds: float = 10.0
    idle_timeout_seconds: float = 5.0
    retry_after_seconds: int = 1
    counts: ConnectionCounts = ConnectionCounts(1024)
    tls: Reloading[ssl.SSLContext] | None = None  # the listener's TLS context; None: plain HTTP
    _stall: asyncio.TimerHandle | None = None
    _head_deadline: asyncio.TimerHandle | None = None
    _transport: asyncio.Transport | None = None
    _tcp: asyncio.Transport | None = None  # the connection under TLS, closed without a TLS goodbye
    _address: str | None = None  # set while counted in ``counts``
    _http_started = False  # uvicorn's connection_made ran (it ran its connection_lost otherwise)
    _head_begun = False  # a request head's first byte came, its end not yet
    _peer_certificate: PeerCertificate | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn's keep-alive timer, armed after each answer, is the idle timeout.
        self.timeout_keep_alive = self.idle_timeout_seconds  # type: ignore[assignment]
        # What the connection's requests share (who the client is: ``service.auth``).
        self._shared: dict[str, object] = {}

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._transport = transport
        address = _peer(transport)[0]
        if self.tls is None:
            self._start_http(transport)
        if not self.counts.admit(address):
            self._refuse_connection(transport)
            return
        self._address = address
        self._expect_head()
        if self.tls is not None:
            self._start_tls(transport, self.tls.current())

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_stall()
        self._cancel_head_deadline()
        if self._address is not None:
            self.counts.release(self._address)
            self._address = None
        if self._http_started:
            super().connection_lost(exc)

    def _refuse_connection(self, transport: asyncio.Transport) -> None:
        """Close a connection over its address's limit: with a 503 over plain HTTP, at once under TLS."""
        if self.tls is not None:  # answering would take the handshake the limit is there to spare
            _drop(transport)
            return
        self._refused = True  # nothing it sends is read
        transport.write(raw_problem(self._too_many_connections(), "/"))
        transport.close()

    def _too_many_connections(self) -> ProblemError:
        return CLIENT_TOO_MANY_CONNECTIONS(
            f"this address has {self.counts.limit} connections open, the most one client may have"
            " (limits.max_connections_per_client); reuse open connections rather than opening more",
            extras={"limit": self.counts.limit},
            headers={"Retry-After": str(self.retry_after_seconds)},
        )

    def log_refusal(self, address: str, problem: ProblemError) -> None:
        self.counts.oversized.warn(
            address,
            "answered %s %s to %s and closed the connection; further ones of this address are not"
            " logged for a minute",
            problem.status,
            problem.slug,
            address,
        )

    def _refuse(self, problem: ProblemError) -> None:
        super()._refuse(problem)
        if self._tcp is not None:
            # The answer is in the connection's buffer now; a TLS goodbye would go on reading (and
            # decrypting) whatever the client still streams until it says goodbye too.
            self._tcp.close()

    def _start_http(self, transport: asyncio.Transport) -> None:
        self._http_started = True
        super().connection_made(transport)

    def _start_tls(self, tcp: asyncio.Transport, context: ssl.SSLContext) -> None:
        """Put the TLS layer between ``tcp`` and this protocol, as ``loop.start_tls`` does, but now."""
        self._tcp = tcp
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        done.add_done_callback(self._handshake_done)
        layer = _tls_layer(loop)(
            loop,
            _Handshaking(self),
            context,
            done,
            server_side=True,
            call_connection_made=True,
            ssl_handshake_timeout=self.head_timeout_seconds,
        )
        tcp.set_protocol(layer)
        layer.connection_made(tcp)

    def secured(self, transport: asyncio.Transport) -> None:
        """The handshake completed: serve HTTP over ``transport``, knowing the client's certificate."""
        self._transport = transport
        self._peer_certificate = peer_certificate(transport.get_extra_info("ssl_object"))
        transport.set_protocol(self)
        self._start_http(transport)

    def _handshake_done(self, done: asyncio.Future[None]) -> None:
        exc = None if done.cancelled() else done.exception()
        if exc is None or self._http_started:
            return
        tcp = self._tcp
        assert tcp is not None
        if self._address is not None and self._head_deadline is not None:  # not closed for being slow
            address, port = _peer(tcp)
            self.counts.refused.warn(
                address,
                "refused the TLS handshake of %s:%s: %s; further ones of this address are not logged"
                " for a minute",
                address,
                port,
                exc,
            )
        _drop(tcp)
        self.connection_lost(exc if isinstance(exc, Exception) else None)

    # -- the request head ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[CONNECTION_SCOPE_KEY] = self._shared  # type: ignore[literal-required]
        if self._peer_certificate is not None:
            self.scope[PEER_SCOPE_KEY] = self._peer_certificate  # type: ignore[literal-required]
        self._head_begun = True

    def on_headers_complete(self) -> None:
        self._head_begun = False
        self._cancel_head_deadline()
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # A head that began in this read and did not end in it gets its deadline now: one that
        # came whole (the usual case) needs no timer.
        if self._head_begun and not self._refused:
            self._expect_head()

    def _expect_head(self) -> None:
        if self._head_deadline is None:
            loop = asyncio.get_running_loop()
            self._head_deadline = loop.call_later(self.head_timeout_seconds, self._head_timed_out)

    def _cancel_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        address, port = _peer(transport)
        self.counts.slow.warn(
            address,
            "closed the connection of %s:%s: no complete request head within %g s"
            " (limits.request_head_timeout_ms); further ones of this address are not logged for a minute",
            address,
            port,
            self.head_timeout_seconds,
        )
        # Under TLS the connection itself is closed: a TLS goodbye would wait for the silent client.
        (self._tcp or transport).close()

    # -- answers the client does not read --------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall is None:
            self._stall = asyncio.get_running_loop().call_later(self.send_timeout_seconds, self._abort)

    def resume_writing(self) -> None:
        self._cancel_stall()
        super().resume_writing()

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
        address, port = _peer(transport)
        logger.warning(
            "closed the connection of %s:%s: its client did not read its answer for %g s"
            " (limits.request_timeout_ms); %d bytes were still unsent",
            address,
            port,
            self.send_timeout_seconds,
            transport.get_write_buffer_size(),
        )
        _drop(transport)


def _peer(transport: asyncio.Transport) -> tuple[str, str]:
    peer = transport.get_extra_info("peername")
    return (str(peer[0]), str(peer[1])) if isinstance(peer, tuple) else ("an unknown client", "?")


def _drop(transport: asyncio.Transport) -> None:
    """Close at once, dropping unsent bytes."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        # Linger 0: the kernel drops what it still holds and resets, rather than keeping an
        # orphaned socket with a full send queue until its retries run out.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def http_protocol(
    limits: LimitSettings, tls: Reloading[ssl.SSLContext] | None = None
) -> type[asyncio.Protocol]:
    """The protocol class ``uvicorn`` serves HTTP with (its ``http`` setting), bounded by ``limits``;
    with ``tls`` it serves HTTPS itself (give uvicorn no TLS settings then).

    Each call makes a class of its own, with its own connection counts: use one per server.
    """
    return type(
        "GuardedProtocol",
        (GuardedProtocol,),
        {
            "send_timeout_seconds": limits.request_timeout_ms / 1000,
            "head_timeout_seconds": limits.request_head_timeout_ms / 1000,
            "idle_timeout_seconds": limits.idle_connection_timeout_ms / 1000,
            "retry_after_seconds": limits.retry_after_seconds,
            "max_head_bytes": int(limits.max_request_head_bytes),
            "max_url_bytes": int(limits.max_url_bytes),
            "counts": ConnectionCounts(limits.max_connections_per_client),
            "tls": tls,
        },
    )


def server_options(settings: Settings) -> dict[str, Any]:
    """The ``uvicorn`` settings of the service's HTTP server for ``settings`` (one server each).

    TLS (``http.tls``) is the protocol's own, so the connection limits hold during handshakes: give
    uvicorn no TLS settings beside these. Proxy headers are believed only from
    ``http.forwarded_allow_ips``; uvicorn would otherwise believe them from 127.0.0.1, letting
    anything beside the service (a sidecar, a local process) claim any address, and so escape the
    per-client limits and write any address into the log.
    """
    tls = settings.http.tls
    trusted = settings.http.forwarded_allow_ips
    return {
        "http": http_protocol(settings.limits, reloading_context(tls) if tls else None),
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": list(trusted) if trusted else [],
    }
