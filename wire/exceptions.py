"""Errors raised by the ``wire`` package.

Hierarchy::

    WireError
    ├── InvalidPositionError    a position string or mapping is malformed (also a ValueError)
    └── ProblemError            a request gets a problem answer (``wire.problems``, next to its catalogue)
"""

from __future__ import annotations


class WireError(Exception):
    """Root of every error the wire package raises."""


class InvalidPositionError(WireError, ValueError):
    """A position is malformed: it must be ``partition:next_offset`` pairs joined by commas."""
