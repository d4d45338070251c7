"""Projection: ``fields=name,address.city`` on any read of a JSON document store (``json``, and
the formats decoded at ingest), so only those fields cross the wire.

Each path names a member of the value's top-level object, dots going into nested objects. The
projected value is an object holding the paths asked, nested as in the value; a path the value
does not have (or that crosses something other than an object) is ``null``. A value that is not
an object is answered whole. Projection parses each stored value answered, so it
costs what it saves only when the fields are a small part of the values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

from service.queries import invalid_parameter

MAX_FIELDS = 64
_NAME = re.compile(r"^[^.,]+$")


class Projection:
    """The paths of one ``fields=`` parameter, applied to stored JSON documents."""

    def __init__(self, paths: Sequence[tuple[str, ...]]) -> None:
        self.paths = tuple(paths)
        # Top-level fields only: the projected value is then the document's own members, as a
        # parse of the whole document that keeps only them gives it (service.struct_answers).
        self.flat = all(len(path) == 1 for path in self.paths)

    @classmethod
    def parse(cls, text: str | None, value_format: str) -> Projection | None:
        """The projection of ``fields=`` (``None`` when not given); 422 invalid-parameter when it
        is malformed or the store's values are not JSON documents."""
        if text is None:
            return None
        if value_format != "json":
            raise invalid_parameter(
                "fields", f"projects JSON documents; this store's values are {value_format}"
            )
        paths = []
        for path in text.split(","):
            names = tuple(path.strip().split("."))
            if not all(_NAME.match(name) for name in names):
                raise invalid_parameter("fields", f"{path!r} is not a dotted path of field names")
            paths.append(names)
        if not paths or len(paths) > MAX_FIELDS:
            raise invalid_parameter("fields", f"names 1 to {MAX_FIELDS} paths, comma-separated")
        return cls(paths)

    def value(self, document: Any) -> Any:
        """The projection of one parsed value; a value that is not an object stays whole (it has no
        fields, and a client typing it must see it does not fit)."""
        if not isinstance(document, dict):
            return document
        projected: dict[str, Any] = {}
        for path in self.paths:
            found: Any = document
            for name in path:
                found = found.get(name) if isinstance(found, dict) else None
            into = projected
            for name in path[:-1]:
                nested = into.setdefault(name, {})
                if not isinstance(nested, dict):  # "a" and "a.b" both asked: the whole "a" wins
                    break
                into = nested
            else:
                into.setdefault(path[-1], found)
        return projected

    def stored(self, value: bytes) -> bytes:
        """The projection of one stored JSON document, as JSON (the value must be JSON)."""
        return orjson.dumps(self.value(orjson.loads(value)))

    def values(self, values: Sequence[bytes | None]) -> list[bytes | None]:
        """Stored values as answered, projected; one that is not JSON stays as stored, so the
        answer reports it as a bad value (an error entry, or the client decoding it finds it bad)
        exactly as without projection."""
        projected: list[bytes | None] = []
        for value in values:
            try:
                projected.append(None if value is None else self.stored(value))
            except orjson.JSONDecodeError:
                projected.append(value)
        return projected
