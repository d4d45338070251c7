"""What Spark tasks run for lookup joins: Arrow batches in, batches with looked-up columns out.

Executor-side code, pyarrow only (the driver side is :mod:`clients.spark`). Chained lookups on the
same DataFrame run as steps of one task function, so the rows cross into Python once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from clients.client import StatestoreClient
from clients.index_lookup import IndexLookup
from clients.lookup import Lookup, LookupSpec
from clients.natural_keys import stored_key_array
from clients.options import ClientOptions
from clients.value_decoding import decode

log = logging.getLogger("clients.spark")

GROUP_ROWS = 262_144
"""Rows looked up together: Spark's Arrow batches (10,000 rows by default) are regrouped to this many.

Every group matches its keys against all the keys the task knows (a hash table built per call), so
few large groups cost far less than many small ones once a task knows most of a dimension."""


class Counter(Protocol):
    """Where tasks count values that did not fit the schema (a Spark accumulator)."""

    def add(self, term: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class JoinStep:
    """One lookup of a (possibly chained) join: its spec, key column, join kind and misfit counter.

    Without an accumulator (Spark Connect has none) the misfits are only logged here; with ``flag``
    the step also appends, after its values, a boolean column saying which rows' values did not fit.
    """

    spec: LookupSpec
    key_index: int  # of the key column in the task's input batches
    how: str  # "left" or "inner"
    counter: Counter | None
    binary_row_keys: bool = False  # index steps: matched row keys as binary, else as UTF-8 text
    flag: bool = False
    time_index: int | None = None  # of the row's time (epoch ms) when each row is read as of its time


def count_misfits(counter: Counter | None, store: str, count: int) -> None:
    if count:
        if counter is not None:
            counter.add(count)
        log.warning("%d value(s) of store %r do not fit value_schema; they are null", count, store)


def grouped(batches: Iterator[pa.RecordBatch], rows: int = GROUP_ROWS) -> Iterator[pa.RecordBatch]:
    """Consecutive batches combined into ones of at least ``rows`` rows (fewer requests, fewer passes)."""
    group: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        group.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield from _combined(group)
            group, count = [], 0
    if group:
        yield from _combined(group)


def _combined(group: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if len(group) == 1:
        yield group[0]
    else:
        yield from pa.Table.from_batches(group).combine_chunks().to_batches()


def _open_lookups(stack: contextlib.ExitStack, specs: Sequence[LookupSpec]) -> list[Lookup | IndexLookup]:
    """One lookup per step, sharing one client (one connection pool) per service."""
    clients: dict[ClientOptions, StatestoreClient] = {}
    lookups: list[Lookup | IndexLookup] = []
    for spec in specs:
        if spec.options not in clients:
            clients[spec.options] = stack.enter_context(StatestoreClient(spec.options))
        client = clients[spec.options]
        # A key lookup is closed with the task: its request threads end with it.
        lookups.append(
            IndexLookup(spec, client) if spec.index is not None else stack.enter_context(Lookup(spec, client))
        )
    return lookups


def _typed_columns(values: pa.Array, spec: LookupSpec) -> list[pa.Array]:
    return list(values.flatten()) if spec.value_type is not None else [values]


Columns = list[pa.Array]


def _index_step(
    step: JoinStep, lookup: IndexLookup, step_key: pa.Array, columns: Columns, keys: Columns
) -> tuple[Columns, Columns]:
    """One index step: every row repeated once per match, the matched row key and values appended."""
    matches = lookup.lookup(step_key, step.how)
    columns = [column.take(matches.parents) for column in columns]
    keys = [key.take(matches.parents) for key in keys]
    row_keys, bad_keys = decode(matches.keys, "bytes" if step.binary_row_keys else "string", None)
    count_misfits(step.counter, step.spec.store, pc.sum(bad_keys).as_py() or 0)
    count_misfits(step.counter, step.spec.store, matches.mismatched)
    columns.append(row_keys)
    columns.extend(_typed_columns(matches.values, step.spec))
    if step.flag:
        columns.append(pc.or_(matches.misfit, bad_keys))
    return columns, keys


def _key_step(
    step: JoinStep, lookup: Lookup, step_key: pa.Array, columns: Columns, keys: Columns, at: pa.Array | None
) -> tuple[Columns, Columns]:
    """One key step (each row as of its time in ``at``, when given): the values appended; an inner
    step drops the rows whose key was not found."""
    result = lookup.lookup(step_key) if at is None else lookup.lookup_at(step_key, at)
    count_misfits(step.counter, step.spec.store, result.mismatched)
    columns = [*columns, *_typed_columns(result.values, step.spec)]
    if step.flag:
        columns.append(result.misfit)
    if step.how == "inner":
        columns = [column.filter(result.found) for column in columns]
        keys = [key.filter(result.found) for key in keys]
    return columns, keys


def _prefetch(steps: Sequence[JoinStep], lookups: list[Lookup | IndexLookup], group: pa.RecordBatch) -> None:
    """Before the first group is looked up: each key step reads its store whole now if the group's
    keys make that worth it and no other worker of the machine is reading it (that worker shares
    it), so the tasks of a job read different stores at once. A step sees the group's rows up to
    the first step that may drop or repeat rows."""
    for step, lookup in zip(steps, lookups, strict=True):
        if isinstance(lookup, IndexLookup) or step.time_index is not None:
            return
        lookup.prefetch(group.column(step.key_index))
        if step.how == "inner":
            return


def join_task(
    steps: Sequence[JoinStep], kept: int, names: list[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: keep the first ``kept`` columns, append every step's values.

    An inner step drops the rows its key did not find before the next step looks anything up; an
    index step repeats each row once per match (and appends the matched row key before the values).
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with contextlib.ExitStack() as stack:
            lookups = _open_lookups(stack, [step.spec for step in steps])
            for group_number, batch in enumerate(grouped(batches)):
                if group_number == 0:
                    _prefetch(steps, lookups, batch)
                columns = [batch.column(i) for i in range(kept)]
                # Every step's key, then the times of the steps that have them: they follow the rows.
                carried = [batch.column(step.key_index) for step in steps]
                time_of: dict[int, int] = {}
                for number, step in enumerate(steps):
                    if step.time_index is not None:
                        time_of[number] = len(carried)
                        carried.append(batch.column(step.time_index))
                for number, (step, lookup) in enumerate(zip(steps, lookups, strict=True)):
                    if isinstance(lookup, IndexLookup):
                        columns, carried = _index_step(step, lookup, carried[number], columns, carried)
                    else:
                        at = carried[time_of[number]] if number in time_of else None
                        columns, carried = _key_step(step, lookup, carried[number], columns, carried, at)
                yield pa.RecordBatch.from_arrays(columns, names=names)

    return run


def udf_task(spec: LookupSpec, counter: Counter | None) -> Callable[[Iterator[pa.Array]], Iterator[pa.Array]]:
    """The iterator UDF function: one answer per input batch, looked up in groups of batches."""

    def answer(lookup: Lookup, group: list[pa.Array]) -> Iterator[pa.Array]:
        key_format = lookup.key_format
        result = lookup.lookup(pa.concat_arrays([stored_key_array(keys, key_format) for keys in group]))
        count_misfits(counter, spec.store, result.mismatched)
        offset = 0
        for keys in group:
            yield result.values.slice(offset, len(keys))
            offset += len(keys)

    def run(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
        with Lookup(spec) as lookup:
            group: list[pa.Array] = []
            for keys in batches:
                group.append(keys)
                if sum(len(k) for k in group) >= GROUP_ROWS:
                    yield from answer(lookup, group)
                    group = []
            if group:
                yield from answer(lookup, group)

    return run
