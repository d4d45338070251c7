"""The HTTP listening sockets, bound before any store opens.

Binding first means a port already in use or a host that does not resolve stops
``statestore serve`` with one line, before a store directory is locked or a restore starts (and
another process's stores are never touched by a start that cannot serve).
"""

from __future__ import annotations

import errno
import socket

from service.exceptions import ConfigError


def bind_listeners(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to every address ``host`` resolves to (as uvicorn would bind them), not yet
    listening; ``ConfigError`` naming the setting when that cannot be done."""
    if not 0 <= port <= 65535:  # the resolver would wrap it around, to some other port
        raise ConfigError(f"http.port: {port} is not a port; give one from 1 to 65535 (0: any free port)")
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ConfigError(
            f"http.host: cannot resolve {host!r} ({reason}); give an address of this machine"
            " (e.g. 0.0.0.0 for every interface) or a name it resolves"
        ) from exc
    addresses = list(dict.fromkeys((family, address) for family, _, _, _, address in found))
    sockets: list[socket.socket] = []
    try:
        for family, address in addresses:
            # Port 0: every address on the one port the first one got.
            chosen = (
                (address[0], sockets[0].getsockname()[1], *address[2:]) if sockets and not port else address
            )
            sockets.append(_bind(family, chosen, host, port))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _bind(family: int, address: tuple[object, ...], host: str, port: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(_bind_failure(exc, host, port, address[0])) from exc
    sock.set_inheritable(False)
    return sock


def _bind_failure(exc: OSError, host: str, port: int, address: object) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"http.port: {address}:{port} is already in use by another process; stop that process"
            " or choose another port (http.port, --port)"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"http.host: {host!r} ({address}) is not an address of this machine; give one of its addresses"
    if exc.errno == errno.EACCES:
        return f"http.port: binding port {port} needs privileges this process lacks; choose a port above 1023"
    return f"http: cannot listen on {address}:{port} ({exc.strerror or exc}); check http.host and http.port"
