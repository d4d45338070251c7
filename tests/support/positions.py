"""The position test vectors both parsers share (``position_vectors.json``)."""

from __future__ import annotations

import json
from pathlib import Path

_VECTORS = json.loads((Path(__file__).parent / "position_vectors.json").read_text(encoding="utf-8"))

VALID: list[tuple[str, dict[int, int]]] = [
    (vector["text"], {int(p): o for p, o in vector["offsets"].items()}) for vector in _VECTORS["valid"]
]
"""Texts both parsers take, with the offsets they mean."""

INVALID: list[str] = _VECTORS["invalid"]
"""Texts both parsers refuse."""
