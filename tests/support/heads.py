"""Clients sending request heads larger than any server should take, over raw sockets."""

from __future__ import annotations

import socket

_CHUNK = b"a" * 65536


def stream_huge_header(sock: socket.socket, path: str, header_bytes: int) -> int:
    """Send ``GET path`` with one header of ``header_bytes`` bytes, until the server stops taking
    them; the bytes of the header it let in (its and our socket buffers included)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: statestore\r\nX-Pad: ".encode())
    sent = 0
    try:
        while sent < header_bytes:
            sent += sock.send(_CHUNK)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends on ``sock`` until it closes it (a reset ends it too: the server
    closed with our unread bytes in its buffer)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data
