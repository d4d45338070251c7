"""The driver side of Spark lookups: check the store, pin a position, fix the output types.

Runs once per ``lookup_join`` / ``lookup_udf`` when the lookup is planned, before any job; what it
pins is kept (see :class:`LookupInfo`) so runs can be reported and reproduced.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import uuid
from typing import Any

import pyarrow as pa
from pyspark import Accumulator, SparkContext
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, DataType, StringType, StructType

from clients.client import StatestoreClient
from clients.exceptions import SchemaMismatchError, StatestoreClientError
from clients.lookup import LookupSpec, decode_json
from clients.options import ClientOptions, Verify
from clients.position import Position, PositionLike
from clients.retry import RetryPolicy

log = logging.getLogger("clients.spark")

SAMPLE_SIZE = 20
"""Values read on the driver to check that ``value_schema`` fits the store at all."""


@dataclasses.dataclass(frozen=True)
class LookupInfo:
    """What a planned lookup pinned, for logs and reproducible runs."""

    lookup_id: str
    store: str
    url: str
    position: str
    value_format: str
    mismatch_counter: Accumulator[int] = dataclasses.field(repr=False, compare=False)
    exact: bool = False  # every read is as_of ``position``: rerun with as_of=position to reproduce
    index: str | None = None  # the index a one-to-many lookup goes through

    @property
    def mismatched_values(self) -> int:
        """Rows whose value did not fit ``value_schema`` (null instead), counted after an action.

        Like every Spark accumulator it counts each time the rows are computed: a second action on
        an uncached DataFrame counts its rows again.
        """
        return int(self.mismatch_counter.value)


_planned: dict[str, LookupInfo] = {}
_planned_lock = threading.Lock()


def planned_lookup(lookup_id: str) -> LookupInfo | None:
    """The lookup planned under ``lookup_id`` in this driver, if any."""
    with _planned_lock:
        return _planned.get(lookup_id)


def value_schema_of(value_schema: str | StructType) -> StructType:
    if isinstance(value_schema, StructType):
        return value_schema
    try:
        parsed = StructType.fromDDL(value_schema)
    except Exception as exc:  # Spark raises parse errors of several JVM-backed types
        raise SchemaMismatchError(
            f"value_schema {value_schema!r} is not a Spark DDL struct, e.g. 'name string, price double'"
        ) from exc
    if not isinstance(parsed, StructType):
        raise SchemaMismatchError(f"value_schema {value_schema!r} must describe a struct of fields")
    return parsed


@dataclasses.dataclass(frozen=True)
class Plan:
    spec: LookupSpec
    value_type: DataType
    info: LookupInfo


def _check_sample(client: StatestoreClient, spec: LookupSpec, schema: StructType) -> None:
    """Fail when the store's values clearly do not fit the schema (none of a sample does).

    Reading the sample ``as_of`` the pinned position also proves that position can be read exactly.
    """
    assert spec.value_type is not None
    sample: list[tuple[Any, bytes]] = []
    # Without as_of the sample reads the store as it is now: the pinned position may lie ahead of it.
    for key, value in client.scan(spec.store, b"", page_size=SAMPLE_SIZE, as_of=spec.as_of):
        sample.append((key, json.dumps(value).encode()))
        if len(sample) >= SAMPLE_SIZE:
            break
    if not sample:
        return
    _, misfits = decode_json(pa.array([v for _, v in sample], pa.binary()), spec.value_type)
    documents = [json.loads(v) for _, v in sample]
    names = set(schema.fieldNames())
    shares_a_field = any(isinstance(d, dict) and names & set(d) for d in documents)
    if all(misfits.to_pylist()) or not shares_a_field:
        key, example = sample[0]
        raise SchemaMismatchError(
            f"value_schema <{schema.simpleString()}> does not fit store {spec.store!r}: none of "
            f"{len(sample)} sampled values matches it (e.g. key {key!r}: {example[:200]!r}); "
            "fix the field names and types"
        )


def plan_lookup(
    *,
    store: str,
    url: str,
    value_schema: str | StructType | None,
    token: str | None,
    verify: Verify,
    min_position: PositionLike | None,
    consistent: bool,
    as_of: PositionLike | None,
    index: str | None,
    batch_size: int,
    timeout: float,
    deadline: float,
    planning_deadline: float,
    cache_bytes: int,
    spark_context: SparkContext,
) -> Plan:
    """Driver side of a lookup: check the store, pin its position, fix the output type.

    ``consistent`` (or an explicit ``as_of``) makes every read exactly as of the pinned position, so
    task retries and reruns read the same table; otherwise reads demand at least that position.
    """
    if as_of is not None and min_position is not None:
        raise ValueError("pass as_of= or min_position=, not both: as_of pins the exact position")
    exact = consistent or as_of is not None
    if isinstance(verify, bool | str):
        options = ClientOptions(
            url,
            token=token,
            verify=verify,
            timeout=timeout,
            deadline=deadline,
            batch_size=batch_size,
            retry=RetryPolicy(max_backoff=5.0),
        )
    else:
        raise TypeError(
            "verify must be True/False or a CA bundle path: tasks rebuild the client on executors"
        )
    planning = dataclasses.replace(
        options, deadline=planning_deadline, timeout=min(timeout, planning_deadline)
    )
    with StatestoreClient(planning) as client:
        try:
            info = client.store(store)
        except StatestoreClientError as exc:
            exc.add_note(
                f"statestore lookup of store {store!r} at {url}: checked on the driver before planning"
            )
            raise
        if as_of is not None:
            position = Position.of(as_of)
        elif min_position is not None:
            position = info.position.merged(Position.of(min_position))
        else:
            position = info.position
        if index is not None and info.value_format != "json":
            raise SchemaMismatchError(
                f"store {store!r} holds {info.value_format} values; indexes exist on JSON stores only"
            )
        schema = value_schema_of(value_schema) if value_schema is not None else None
        if schema is not None and info.value_format != "json":
            raise SchemaMismatchError(
                f"store {store!r} holds {info.value_format} values; value_schema applies to JSON stores only:"
                f" drop value_schema to get a {'binary' if info.value_format == 'bytes' else 'string'} column"
            )
        arrow_type = pa.struct(list(to_arrow_schema(schema))) if schema is not None else None
        spec = LookupSpec(
            options, store, str(position), info.value_format, arrow_type, cache_bytes, exact, index
        )
        _check_reads(client, spec)
        if schema is not None:
            _check_sample(client, spec, schema)
    value_type: DataType = schema or (BinaryType() if info.value_format == "bytes" else StringType())
    lookup_id = uuid.uuid4().hex
    planned = LookupInfo(
        lookup_id, store, url, str(position), info.value_format, spark_context.accumulator(0), exact, index
    )
    with _planned_lock:
        _planned[lookup_id] = planned
    through = f" through index {index!r}" if index is not None else ""
    if exact:
        log.info(
            "lookup %s of store %r%s at %s reads exactly as of position %s (rerun with as_of=%r)",
            lookup_id[:8], store, through, url, position or "(empty)", str(position),
        )  # fmt: skip
    else:
        log.info(
            "lookup %s of store %r%s at %s pinned to position %s",
            lookup_id[:8], store, through, url, position or "(empty)",
        )  # fmt: skip
    return Plan(spec, value_type, planned)


def _check_reads(client: StatestoreClient, spec: LookupSpec) -> None:
    """Fail on the driver when the executors' reads cannot work: unknown index, history not kept
    or expired (an index lookup of one value and an ``as_of`` read say so)."""
    if spec.index is not None:
        client.index_arrow(
            spec.store, spec.index, pa.array([""], pa.string()), min_position=spec.min_position,
            as_of=spec.as_of, limit_per_value=1,
        )  # fmt: skip
    elif spec.exact:
        client.get_arrow(spec.store, pa.array([b"\x00"], pa.binary()), as_of=spec.as_of)
