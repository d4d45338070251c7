"""Raw client sockets for the connection-bound tests: connect from a chosen address, see a close."""

from __future__ import annotations

import socket


def connect(url: str, source: str = "127.0.0.1") -> socket.socket:
    """A TCP connection to the service at ``url`` (http or https) from address ``source``; nothing sent."""
    host, port = url.split("://", 1)[-1].split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.connect((host, int(port)))
    return sock


def closed_by_server(sock: socket.socket, timeout: float = 10) -> bool:
    """Whether the server closes ``sock`` (end of stream or reset) within ``timeout``; reads what came."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True
