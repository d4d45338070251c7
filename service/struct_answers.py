"""Arrow answers of stores decoded at ingest: the ``value`` column a struct typed from the schema.

A store whose values are ``avro``, ``protobuf`` or ``json_schema`` keeps each value as the JSON
document of its record in the latest version's shape; an Arrow answer parses those documents into
the struct of the latest schema (:mod:`service.typed_values`), projected to ``fields=`` when asked.
A value that does not parse into it (a stored value that could not be decoded at ingest, or one
written before a change of a field's type) is a null value with its problem type in the
``error`` column, never a wrong value. Stores of other formats answer the stored bytes as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from clients.value_decoding import decode_json
from service.answers import AnswerBudget, stored_first
from service.projection import Projection
from service.registry import ServedStore
from store.formats import undecodable_reason
from wire.problems import TYPE_PREFIX, VALUE_UNDECODABLE

T = TypeVar("T")


def projected(struct: pa.StructType, paths: Sequence[tuple[str, ...]]) -> pa.StructType:
    """The part of ``struct`` that ``fields=`` paths keep, nested as the projected documents are
    (service.projection: the first path naming a field decides whether it is whole; a path the
    type does not have is a ``null``-typed field, which the documents carry as null)."""
    fields: dict[str, pa.DataType] = {}
    whole: set[str] = set()
    for path in paths:
        name, rest = path[0], path[1:]
        index = struct.get_field_index(name)
        typed = struct.field(index).type if index >= 0 else pa.null()
        if name in whole:
            continue
        if not rest:
            if name not in fields:
                fields[name] = typed
                whole.add(name)
            continue
        deeper = projected(typed, [rest]) if isinstance(typed, pa.StructType) else pa.null()
        before = fields.get(name)
        if isinstance(before, pa.StructType) and isinstance(deeper, pa.StructType):
            deeper = pa.struct([*before, *(f for f in deeper if before.get_field_index(f.name) < 0)])
        fields[name] = deeper
    return pa.struct([pa.field(name, typed) for name, typed in fields.items()])


def latest_struct(served: ServedStore) -> pa.StructType | None:
    """The struct of ``served``'s latest schema, which its typed Arrow answers carry; ``None`` for a
    store whose values have no struct (its answers carry the stored bytes). Resolved once an
    answer: the reading and the parsing of one answer agree on it."""
    return served.value_type() if served.value_type is not None else None


def typed_read(
    latest: pa.StructType | None,
    projection: Projection | None,
    read: Callable[[AnswerBudget], T],
    budget: AnswerBudget,
) -> T:
    """The values of an Arrow answer typed by ``latest`` (:func:`latest_struct`), read by ``read``:
    as stored when ``fields=`` names top-level fields only and the values fit ``budget``'s bound
    as stored (``service.answers.stored_first``), else within ``budget``, projected.

    Parsing a stored document into the projected struct skips the fields it does not name, and
    gives what parsing its projection does; projecting each value first (a JSON parse and encode,
    to count the projected bytes) cost more than the parse itself. Not for dotted paths: the
    projected document holds an object on the path even where the value has none (``{"address":
    {"city": null}}`` for a value without ``address``), which the stored document's parse would
    answer null."""
    if projection is not None and projection.flat and latest is not None:
        return stored_first(read, budget)
    return read(budget)


def _problem(value: bytes | None) -> str | None:
    if value is None:
        return None
    reason = undecodable_reason(value)
    if reason is not None:
        return TYPE_PREFIX + reason.split(":", 1)[0]
    return VALUE_UNDECODABLE.uri  # a document that does not fit the latest schema's types


def struct_values(
    latest: pa.StructType | None, values: Sequence[bytes | None], projection: Projection | None
) -> tuple[pa.Array, pa.Array] | None:
    """The stored ``values`` as a struct column typed from ``latest``, the latest schema's
    (:func:`latest_struct`; projected to ``fields=``), and the ``error`` column beside it;
    ``None`` for a store whose values have no struct (the caller answers the stored bytes)."""
    if latest is None:
        return None
    struct = latest if projection is None else projected(latest, projection.paths)
    stored = pa.array(values, pa.binary())
    parsed, bad = decode_json(stored, struct)
    errors: pa.Array = pa.nulls(len(values), pa.string())
    if pc.any(bad).as_py():
        errors = pa.array([_problem(v) if b else None for v, b in zip(values, bad.to_pylist(), strict=True)])
    return parsed, errors.cast(pa.string())


def struct_table(
    latest: pa.StructType | None,
    key_column: pa.Array,
    values: Sequence[bytes | None],
    projection: Projection | None,
) -> pa.Table | None:
    """The Arrow answer of a batch get as ``key``, ``value`` (a struct typed by ``latest``) and
    ``error`` columns; ``None`` for a store whose values have no struct (the caller answers the
    stored bytes)."""
    typed = struct_values(latest, values, projection)
    if typed is None:
        return None
    parsed, errors = typed
    return pa.table({"key": key_column, "value": parsed, "error": errors})


def stored_table(
    served: ServedStore, key_column: pa.Array, values: Sequence[bytes | None]
) -> pa.Table | None:
    """The Arrow answer of a ``values=stored`` batch get of a store decoding at ingest that holds
    a value it could not decode: ``key``, ``value`` (the stored documents, those values null) and
    ``error`` (their problem types), as the typed answer marks them; ``None`` when no value is such
    (the usual answer: the caller writes the stored bytes, one search of them for a mark's NUL)."""
    if served.value_type is None or not any(v is not None and v[:1] == b"\x00" for v in values):
        return None
    problems = [None if v is None or v[:1] != b"\x00" else _problem(v) for v in values]
    kept = [None if problem is not None else v for v, problem in zip(values, problems, strict=True)]
    return pa.table(
        {"key": key_column, "value": pa.array(kept, pa.binary()), "error": pa.array(problems, pa.string())}
    )
