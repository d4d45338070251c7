"""Which fields of its values a typed Spark lookup asks the service for (``fields=``).

Decided once, on the driver, when the lookup is planned: a key lookup typed by a schema needs only
that schema's fields, and asks for only those when the service answers them for less than whole
values. Written against pyspark's types only (no session).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pyspark.sql.types import StructType

PROJECTION_MIN_SAVING = 1024
"""Bytes a value must shed on average (in the driver's sample) for a typed lookup of a ``json`` store
to ask the service for only the fields its schema names (``fields=``). Projecting costs the service
a JSON parse and encode of every value (a batch get of 100-byte values answered several times
slower), more than carrying a few hundred bytes more, which the tasks skip as they parse. A store
the service types (``avro``, ``protobuf``, ``json_schema``) is asked for fewer fields whatever
their size (:func:`typed_projection`)."""


def needed_fields(schema: StructType | None, index: str | None) -> tuple[str, ...] | None:
    """A typed join needs only the schema's fields: the service is asked for no others. Not when a
    name cannot be sent as one field of ``fields=`` (it would name a path, or several fields)."""
    if schema is None or index is not None:
        return None
    names = tuple(field.name for field in schema.fields)
    if not all(name and name == name.strip() and "." not in name and "," not in name for name in names):
        return None
    return names


def projection(documents: Sequence[Any], names: tuple[str, ...]) -> tuple[str, ...] | None:
    """The fields a typed lookup asks for: ``names`` when that sheds at least
    ``PROJECTION_MIN_SAVING`` bytes a value from the sampled ``documents`` (or there is no sample),
    else ``None`` (whole values)."""
    if not documents:
        return names
    shed = 0
    for document in documents:
        if isinstance(document, dict):
            kept = {name: document[name] for name in names if name in document}
            shed += len(json.dumps(document)) - len(json.dumps(kept))
    return names if shed >= PROJECTION_MIN_SAVING * len(documents) else None


def typed_projection(names: tuple[str, ...], served: Sequence[str]) -> tuple[str, ...] | None:
    """The fields a typed lookup asks of a store the service types (``StoreInfo.value_schema``,
    whose fields are ``served``): those of ``names`` the store has, when they are fewer than all of
    its fields, else ``None`` (whole values). The service parses each stored value into the struct
    of the fields asked, skipping the others, at less cost than the whole struct; a name the store
    lacks is null either way (asked, it would name a field the service does not type)."""
    known = set(served)
    kept = tuple(dict.fromkeys(name for name in names if name in known))
    return kept if kept and len(kept) < len(known) else None
