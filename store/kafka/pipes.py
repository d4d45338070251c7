"""Messages between the store's process and its consumer process, as frames on a pipe.

A frame is the length of a pickle (4 bytes, big-endian), then the pickle of plain values (tuples,
lists, dicts, bytes, numbers, text). One writer per pipe, frames of any size.

A leaf module: it imports nothing of this package, so the consumer process
(``store/kafka/consumer_process.py``) imports it without the package's dependencies.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
from typing import Any

_FRAME_HEADER = struct.Struct(">I")


def write_message(fd: int, message: Any) -> None:
    """Write ``message`` (plain values) to the file descriptor ``fd`` as one frame, of any size.

    For a pipe with one writer: a large frame takes several writes.
    """
    frame = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_FRAME_HEADER.pack(len(frame)) + frame)
    while view:
        view = view[os.write(fd, view) :]


class MessageReader:
    """Reads the frames :func:`write_message` writes to a pipe, waiting at most a given time."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()

    def read(self, timeout: float | None) -> Any:
        """The next message; ``None`` if no frame began within ``timeout`` seconds (``None``: no
        limit). A frame begun is read to its end. Raises ``EOFError`` at the end of the pipe."""
        if not self._buffer:
            ready, _, _ = select.select([self._fd], [], [], timeout)
            if not ready:
                return None
        header = self._take(_FRAME_HEADER.size)
        (length,) = _FRAME_HEADER.unpack(header)
        try:
            return pickle.loads(self._take(length))
        except (pickle.UnpicklingError, EOFError, ValueError) as exc:
            raise EOFError(f"not a message frame: {exc!r}") from exc

    def _take(self, size: int) -> bytes:
        buffer = self._buffer
        while len(buffer) < size:
            chunk = os.read(self._fd, max(size - len(buffer), 1 << 16))
            if not chunk:
                raise EOFError("the pipe ended")
            buffer += chunk
        taken = bytes(buffer[:size])
        del buffer[:size]
        return taken
