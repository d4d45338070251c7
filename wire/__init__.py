"""The vocabulary the store, the service and the clients share: positions and problem types.

``wire.position``: :class:`Position` (one exact version of a table, ``0:1200,1:1187``), which the
store keeps, the service sends in the ``Statestore-Position`` header and the clients pin and
demand. ``wire.problems``: the catalogue of problem types the service answers with (slug, status,
title), which the clients map to their exceptions. A leaf: it imports nothing of ours and needs
nothing beyond the standard library, so the client install (``statestore[client]``) carries it.
"""

from wire.exceptions import InvalidPositionError, WireError
from wire.position import Position, PositionLike

__all__ = ["InvalidPositionError", "Position", "PositionLike", "WireError"]
