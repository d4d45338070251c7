"""One-to-many lookups of Arrow value columns through a store's index, for Spark tasks.

Each input row becomes one output row per matching store row (``how="inner"`` drops rows without
matches, ``"left"`` keeps them once with nulls). Values are deduplicated and every distinct value is
asked once per task (a bounded per-task cache), in large Arrow batches; pyarrow only, tested
without Spark.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc

from clients.client import StatestoreClient
from clients.lookup import LookupSpec
from clients.value_decoding import decode


@dataclasses.dataclass(frozen=True, slots=True)
class IndexMatches:
    """The output rows of an index lookup: ``parents[i]`` is the input row of output row ``i``.

    ``keys`` are the matched rows' keys and ``values`` their values (typed per the spec); both are
    null on the one row a left lookup keeps for an input row without matches.
    """

    parents: pa.Array
    keys: pa.Array
    values: pa.Array
    mismatched: int  # output rows whose stored value does not fit the value type (they hold null)
    misfit: pa.BooleanArray  # which output rows those are


class KnownMatches:
    """The matches of every value one task has looked up, as flat Arrow arrays, bounded in bytes.

    Value ``values[i]`` matches the ``count[i]`` rows from ``start[i]`` of ``keys``/``rows``; a value
    without matches has count 0 and its ``start`` names one null row (what a left lookup keeps).
    """

    def __init__(self, value_type: pa.DataType, max_bytes: int) -> None:
        self.value_type = value_type
        self.max_bytes = max_bytes
        self.reset()

    def reset(self) -> None:
        self.values: pa.Array = pa.array([], pa.string())
        self.start: pa.Array = pa.array([], pa.int64())
        self.count: pa.Array = pa.array([], pa.int64())
        self.keys: pa.Array = pa.array([], pa.binary())
        self.rows: pa.Array = pa.array([], self.value_type)
        self.misfit: pa.Array = pa.array([], pa.bool_())

    @property
    def full(self) -> bool:
        return int(self.keys.nbytes + self.rows.nbytes + self.values.nbytes) > self.max_bytes

    def index(self, values: pa.Array) -> pa.Array:
        """For every value its place among the known values, null when unknown (or a null value)."""
        return pc.index_in(values, value_set=self.values)

    def add(self, answer: pa.Table, rows: pa.Array, misfit: pa.Array) -> pa.Array:
        """Learn an ``index_arrow`` answer (rows decoded as ``rows``); returns the values it answered.

        The answer holds each value's rows together, one null row for a value without matches.
        """
        if answer.num_rows == 0:
            return pa.array([], pa.string())
        encoded = pc.run_end_encode(answer.column("value").combine_chunks(), run_end_type=pa.int64())
        ends = encoded.run_ends
        starts = pa.concat_arrays([pa.array([0], pa.int64()), ends.slice(0, len(ends) - 1)])
        keys = answer.column("key").combine_chunks()
        lengths = pc.subtract(ends, starts)
        counts = pc.if_else(pc.is_valid(keys.take(starts)), lengths, pa.scalar(0, pa.int64()))
        self.values = pa.concat_arrays([self.values, encoded.values])
        self.start = pa.concat_arrays([self.start, pc.add(starts, len(self.keys))])
        self.count = pa.concat_arrays([self.count, counts])
        self.keys = pa.concat_arrays([self.keys, keys])
        self.rows = pa.concat_arrays([self.rows, rows])
        self.misfit = pa.concat_arrays([self.misfit, misfit])
        answered: pa.Array = encoded.values
        return answered


def expand(counts: pa.Array, starts: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Output rows for per-input-row ``counts``: each row's parent, and the match each one takes.

    Output row ``j`` of input row ``i`` takes match ``starts[i] + j`` (null where ``starts`` is).
    """
    offsets = pa.concat_arrays(
        [pa.array([0], pa.int64()), pc.cumulative_sum(counts.cast(pa.int64())).cast(pa.int64())]
    )
    total = offsets[-1].as_py() if len(offsets) else 0
    parents = pc.list_parent_indices(pa.LargeListArray.from_arrays(offsets, pa.nulls(total)))
    ordinal = pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), total)), 1)
    within = pc.subtract(ordinal, offsets.take(parents))
    return parents, pc.add(starts.take(parents).cast(pa.int64()), within)


def index_values_array(values: pa.Array) -> pa.Array:
    """A column of indexed values as ``string`` (indexes compare text)."""
    if pa.types.is_string(values.type):
        return values
    if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        return values.cast(pa.string())
    if pa.types.is_boolean(values.type):
        return pc.if_else(values, "true", "false")
    return values.cast(pa.string())


class IndexLookup:
    """Looks up Arrow value columns through ``spec.index`` for one task, remembering what it learnt."""

    def __init__(self, spec: LookupSpec, client: StatestoreClient) -> None:
        if spec.index is None:
            raise ValueError("an index lookup needs a spec with an index")
        self.spec = spec
        self.index_name: str = spec.index
        self.client = client
        self.known = KnownMatches(spec.output_type, spec.cache_bytes)

    def _learn(self, values: pa.Array) -> pa.Array:
        spec = self.spec
        answer = self.client.index_arrow(
            spec.store, self.index_name, values, min_position=spec.min_position, as_of=spec.as_of
        )
        rows, misfit = decode(answer.column("row").combine_chunks(), spec.value_format, spec.value_type)
        return self.known.add(answer, rows, misfit)

    def lookup(self, values: pa.Array, how: str) -> IndexMatches:
        """The matches of every row of ``values`` (null values match nothing), expanded per ``how``."""
        values = index_values_array(values)
        if self.known.full:
            self.known.reset()
        places = self.known.index(values)
        unknown = pc.and_(pc.is_null(places), pc.is_valid(values))
        if pc.any(unknown).as_py():
            before = len(self.known.values)
            answered = self._learn(pc.unique(values.filter(unknown)))
            places = pc.coalesce(places, pc.add(pc.index_in(values, value_set=answered), before))
        counts = pc.fill_null(self.known.count.take(places), 0)
        if how == "left":
            counts = pc.max_element_wise(counts, pa.scalar(1, pa.int64()))
        parents, matches = expand(counts, self.known.start.take(places))
        misfit = pc.fill_null(self.known.misfit.take(matches), False)
        return IndexMatches(
            parents,
            self.known.keys.take(matches),
            self.known.rows.take(matches),
            pc.sum(misfit).as_py() or 0,
            misfit,
        )
