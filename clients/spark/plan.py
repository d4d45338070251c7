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
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, DataType, StringType, StructType

from clients.client import StatestoreClient
from clients.exceptions import (
    SchemaMismatchError,
    StatestoreClientError,
    UnauthorizedError,
    UnsupportedSparkError,
)
from clients.lookup import LookupSpec
from clients.options import Cert, ClientOptions, Verify
from clients.spark.broadcast import BROADCAST_KEY_FORMATS, Dimension, read_dimension
from clients.spark.compat import Counter, arrow_schema, conf_values, is_connect, new_counter, parse_struct
from clients.spark.fields import needed_fields, projection, typed_projection
from clients.spark.options import LookupOptions, client_options
from clients.spark.plan_cache import KeptRead, plans, reads_key
from clients.value_decoding import decode_json
from clients.whole_store import store_keys
from clients.wire import StoreInfo
from wire.position import Position, PositionLike

log = logging.getLogger("clients.spark")

SAMPLE_SIZE = 20
"""Values read on the driver to check that ``value_schema`` fits the store at all."""

URL_CONF = "spark.statestore.url"
TOKEN_CONF = "spark.statestore.token"
TOKEN_FILE_CONF = "spark.statestore.authFile"
CA_FILE_CONF = "spark.statestore.caFile"
CERT_FILE_CONF = "spark.statestore.certFile"
KEY_FILE_CONF = "spark.statestore.keyFile"
"""Spark conf keys whose values are the defaults of every lookup and read of the session.

The token file's key holds no "token": Spark Connect hides from its clients every conf whose key
or value matches ``spark.redaction.regex`` (secret, password, token, ...), so under Connect
``spark.statestore.token`` cannot be read back; the file works when its path does not say "token"
either (e.g. ``/etc/statestore/auth``). ``caFile`` is the CA bundle verifying the service,
``certFile`` and ``keyFile`` a client certificate and its key (mTLS): files read where the client
runs, so on the driver and on every executor at the same path (a mounted Secret, or ``--files``).
"""


UNREADABLE_TOKEN = (
    f"under Spark Connect the server hides {TOKEN_CONF} from clients (every conf whose key or value "
    f"says token, secret or password): set {TOKEN_FILE_CONF} to a file holding the token, at a path "
    "without those words, or pass token="
)


def connection(session: SparkSession, url: str | None, token: str | None) -> tuple[str, str | None]:
    """The service URL and token of a call: the arguments, else the session's Spark conf.

    ``url=`` overrides ``spark.statestore.url``; ``token=`` overrides ``spark.statestore.token``,
    which overrides ``spark.statestore.authFile`` (a file holding the token, read on the driver;
    under Spark Connect the only one of the two the server lets a client read).
    """
    keys = ([] if url else [URL_CONF]) + ([TOKEN_CONF, TOKEN_FILE_CONF] if token is None else [])
    conf = conf_values(session, keys)  # one round trip under Spark Connect
    url = url or conf[URL_CONF]
    if not url:
        raise ValueError(f"no statestore URL: pass url= or set {URL_CONF} in the Spark conf")
    if token is None:
        token = conf[TOKEN_CONF]
    if token is None:
        token_file = conf[TOKEN_FILE_CONF]
        if token_file is not None:
            try:
                token = Path(token_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ValueError(
                    f"{TOKEN_FILE_CONF} names {token_file!r}, which cannot be read on the driver: {exc}"
                ) from exc
    return url, token


def client_tls(session: SparkSession, verify: Verify, cert: Cert | None) -> tuple[bool | str, Cert | None]:
    """The CA bundle and client certificate of a call: the arguments, else the session's conf.

    ``verify=True`` (the default) takes ``spark.statestore.caFile`` when set; ``cert=None`` takes
    ``spark.statestore.certFile`` with ``spark.statestore.keyFile``.
    """
    if not isinstance(verify, bool | str):
        raise TypeError(
            "verify must be True/False or a CA bundle path: tasks rebuild the client on executors"
        )
    keys = ([CA_FILE_CONF] if verify is True else []) + (
        [CERT_FILE_CONF, KEY_FILE_CONF] if cert is None else []
    )
    conf = conf_values(session, keys)  # one round trip under Spark Connect
    if verify is True:
        verify = conf[CA_FILE_CONF] or True
    if cert is None:
        certfile = conf[CERT_FILE_CONF]
        keyfile = conf[KEY_FILE_CONF]
        if keyfile and not certfile:
            raise ValueError(f"{KEY_FILE_CONF} is set without {CERT_FILE_CONF}: set both, or neither")
        if certfile:
            cert = (certfile, keyfile) if keyfile else certfile
    return verify, cert


@dataclasses.dataclass(frozen=True)
class LookupInfo:
    """What a planned lookup pinned, for logs and reproducible runs."""

    lookup_id: str
    store: str
    url: str
    position: str
    value_format: str
    mismatch_counter: Counter | None = dataclasses.field(repr=False, compare=False)
    exact: bool = False  # every read is as_of ``position``: rerun with as_of=position to reproduce
    index: str | None = None  # the index a one-to-many lookup goes through
    # Spark Connect (no accumulators): the observations whose metric ``lookup_id`` counts misfits,
    # or ``None`` when nothing can count them (the reason is ``uncounted``).
    observations: list[Any] | None = dataclasses.field(default=None, repr=False, compare=False)
    uncounted: str | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def mismatched_values(self) -> int:
        """Rows whose value did not fit ``value_schema`` (null instead), counted after an action.

        On a classic session an accumulator counts them, each time the rows are computed: a second
        action on an uncached DataFrame counts its rows again. Under Spark Connect (no accumulators)
        ``DataFrame.observe`` metrics count them, for the first action on each DataFrame the lookup
        produced; where that cannot work an ``UnsupportedSparkError`` says what to use instead.
        """
        if self.mismatch_counter is not None:
            return int(self.mismatch_counter.value)
        if self.observations is None:
            raise UnsupportedSparkError(self.uncounted or "this lookup cannot count misfits")
        return sum(int(observation.get.get(self.lookup_id) or 0) for observation in self.observations)


_planned: dict[str, LookupInfo] = {}
_planned_lock = threading.Lock()


def planned_lookup(lookup_id: str) -> LookupInfo | None:
    """The lookup planned under ``lookup_id`` in this driver, if any."""
    with _planned_lock:
        return _planned.get(lookup_id)


def _value_schema(
    session: SparkSession, info: StoreInfo, value_schema: str | StructType | None, index: str | None
) -> StructType | None:
    """The schema values are typed by: ``value_schema`` if given, else the one a store decoding its
    values at ingest says (``StoreInfo.value_schema``; not for index lookups), else none."""
    served = info.raw.get("value_schema")
    if value_schema is None and isinstance(served, str) and index is None:
        value_schema = served
    return value_schema_of(session, value_schema) if value_schema is not None else None


def value_schema_of(session: SparkSession, value_schema: str | StructType) -> StructType:
    if isinstance(value_schema, StructType):
        return value_schema
    return parse_struct(session, value_schema)


@dataclasses.dataclass(frozen=True)
class Plan:
    spec: LookupSpec
    value_type: DataType
    info: LookupInfo
    dimension: Dimension | None = None  # the store read whole, for Spark to broadcast


def _asked_fields(
    session: SparkSession, info: StoreInfo, names: tuple[str, ...], sample: list[tuple[Any, Any]]
) -> tuple[str, ...] | None:
    """The fields a typed key lookup asks the service for (``fields=``), or ``None``: whole values."""
    served = info.raw.get("value_schema")
    if isinstance(served, str):
        return typed_projection(names, value_schema_of(session, served).fieldNames())
    return projection([document for _, document in sample], names)


def _check_sample(client: StatestoreClient, spec: LookupSpec, schema: StructType) -> list[tuple[Any, Any]]:
    """Fail when the store's values clearly do not fit the schema (none of a sample does); the
    sample's keys and values.

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
        return []
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
    return [(key, document) for (key, _), document in zip(sample, documents, strict=True)]


def plan_lookup(
    options: LookupOptions,
    session: SparkSession,
    *,
    observations: list[Any] | None = None,
    uncounted: str | None = None,
) -> Plan:
    """Driver side of a lookup: check the store, pin its position, fix the output type.

    ``observations`` collects the Spark Connect observations that count misfits (``None``: nothing
    can count them, for the reason ``uncounted``). ``url``, ``token``, ``verify`` and ``cert`` default
    to the session's Spark conf (see :func:`connection` and :func:`client_tls`).
    """
    url, token = connection(session, options.url, options.token)
    verify, cert = client_tls(session, options.verify, options.cert)
    store = options.store
    task_options = dataclasses.replace(
        client_options(url, token, verify, options.timeout, options.deadline, cert),
        batch_size=options.batch_size,
    )
    planning = dataclasses.replace(
        task_options,
        deadline=options.planning_deadline,
        timeout=min(options.timeout, options.planning_deadline),
    )
    with StatestoreClient(planning) as client:
        try:
            info = client.store(store)
        except StatestoreClientError as exc:
            exc.add_note(
                f"statestore lookup of store {store!r} at {url}: checked on the driver before planning"
            )
            if isinstance(exc, UnauthorizedError) and token is None and is_connect(session):
                exc.add_note(UNREADABLE_TOKEN)
            raise
        position = _pinned(info.position, options.as_of, options.min_position)
        key = reads_key(url, token, verify, cert, options)
        read = plans.get(key, info, position, options)
        if read is None:
            read = _planned_read(client, session, options, info, position, task_options)
            plans.put(key, info, position, options, read)
    spec, value_type = read.spec, read.value_type
    lookup_id = uuid.uuid4().hex
    counter = new_counter(session)
    if read.dimension is not None and counter is None:
        observations = []  # a broadcast store has no misfit: the count is known, zero
    planned = LookupInfo(
        lookup_id, store, url, str(position), info.value_format, counter, options.exact,
        options.index, observations if counter is None else None, uncounted,
    )  # fmt: skip
    with _planned_lock:
        _planned[lookup_id] = planned
    _log_plan(planned, position)
    if read.dimension is not None:
        log.info(
            "lookup %s broadcasts store %r: %d keys read on the driver",
            lookup_id[:8], store, len(read.dimension.keys),
        )  # fmt: skip
    return Plan(spec, value_type, planned, read.dimension)


def _planned_read(
    client: StatestoreClient,
    session: SparkSession,
    options: LookupOptions,
    info: StoreInfo,
    position: Position,
    task_options: ClientOptions,
) -> KeptRead:
    """What the tasks of a lookup planned now read: its spec (checked against the store: reads at
    the pinned position work, the schema fits a sample of values) and the output type."""
    store, index = options.store, options.index
    schema = _value_schema(session, info, options.value_schema, index)
    _check_format(store, info.value_format, index, schema)
    arrow_type = pa.struct(list(arrow_schema(schema))) if schema is not None else None
    spec = LookupSpec(
        task_options,
        store,
        str(position),
        info.value_format,
        arrow_type,
        options.cache_bytes,
        options.exact,
        index,
        key_format=info.key_format,
        # Reads as of a time answer whole values (their tasks decode them); so does a history
        # read whole, which is what the task may read instead.
        fields=None if options.at_times else needed_fields(schema, index),
    )
    _check_reads(client, spec)
    sample: list[tuple[Any, Any]] = []
    if schema is not None:
        sample = _check_sample(client, spec, schema)
        if spec.fields is not None:
            spec = dataclasses.replace(spec, fields=_asked_fields(session, info, spec.fields, sample))
    if options.scan_bytes:
        spec = dataclasses.replace(
            spec,
            store_keys=whole_store_keys(info, spec),
            scan_bytes=options.scan_bytes,
            # Names this read: tasks keep (and share) a store read whole for this read only.
            lookup_id=uuid.uuid4().hex,
        )
    value_type: DataType = schema or (BinaryType() if info.value_format == "bytes" else StringType())
    dimension = None
    # A position the store has not reached yet is waited for by the tasks, not by the planning.
    reached = info.position.reaches(position)
    if options.broadcast_bytes and reached and info.key_format in BROADCAST_KEY_FORMATS:
        dimension = read_dimension(
            client, spec, whole_store_keys(info, spec), sample, options.broadcast_bytes
        )
    return KeptRead(spec, value_type, dimension)


def whole_store_keys(info: StoreInfo, spec: LookupSpec) -> int | None:
    """The store's key count (``clients.whole_store.store_keys``: counted by the service, else its
    estimate), when its tasks may read it whole (``clients.whole_store``; a lookup by time reads its
    history whole, ``clients.history``): key lookups on one service, of whole values as stored (no
    ``fields=``, not typed by the service); ``None``: keys always go by batch gets (for a sharded
    store, each row's key and time by batch gets)."""
    keys = store_keys(info.raw)
    if (
        spec.index is not None
        or spec.fields is not None
        or info.raw.get("value_schema") is not None
        or spec.options.sharded
        or info.sharding.shards > 1
        or keys is None
    ):
        return None
    return keys


def _pinned(current: Position, as_of: PositionLike | None, min_position: PositionLike | None) -> Position:
    """The position a lookup pins: ``as_of`` exactly, else the store's, at least ``min_position``."""
    if as_of is not None:
        return Position.of(as_of)
    if min_position is not None:
        return current.merged(Position.of(min_position))
    return current


def _check_format(store: str, value_format: str, index: str | None, schema: StructType | None) -> None:
    """Indexes and ``value_schema`` need a JSON store: fail on the driver, naming what to do."""
    if index is not None and value_format != "json":
        raise SchemaMismatchError(
            f"store {store!r} holds {value_format} values; indexes exist on JSON stores only"
        )
    if schema is not None and value_format != "json":
        raise SchemaMismatchError(
            f"store {store!r} holds {value_format} values; value_schema applies to JSON stores only:"
            f" drop value_schema to get a {'binary' if value_format == 'bytes' else 'string'} column"
        )


def _log_plan(planned: LookupInfo, position: Position) -> None:
    through = f" through index {planned.index!r}" if planned.index is not None else ""
    if planned.exact:
        log.info(
            "lookup %s of store %r%s at %s reads exactly as of position %s (rerun with as_of=%r)",
            planned.lookup_id[:8], planned.store, through, planned.url, position or "(empty)", str(position),
        )  # fmt: skip
    else:
        log.info(
            "lookup %s of store %r%s at %s pinned to position %s",
            planned.lookup_id[:8], planned.store, through, planned.url, position or "(empty)",
        )  # fmt: skip


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
