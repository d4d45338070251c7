"""What differs between the PySpark versions and session kinds the Spark client runs on.

Supported: PySpark 3.5.x to the newest 4.x, on a classic session (a local JVM, a ``SparkContext``)
and on a Spark Connect session (no ``SparkContext``, no accumulators, no ``_jdf``). Everything that
depends on the version or the session kind is decided here, so the rest of the client never asks.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Protocol

import pyarrow as pa
import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from clients.exceptions import SchemaMismatchError, UnsupportedSparkError


def _version(text: str) -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)", text)
    if found is None:
        raise ValueError(f"cannot read a version from {text!r}")
    return int(found.group(1)), int(found.group(2))


PYSPARK_VERSION: tuple[int, int] = _version(pyspark.__version__)
"""The installed PySpark's major and minor version (the client's, not necessarily the server's)."""

MINIMUM_VERSION = (3, 5)


def require(feature: str, minimum: tuple[int, int]) -> None:
    """Raise a clear error naming ``feature``, the version it needs and the one installed."""
    if minimum > PYSPARK_VERSION:
        raise UnsupportedSparkError(
            f"{feature} needs PySpark {minimum[0]}.{minimum[1]} or newer; this is PySpark "
            f"{pyspark.__version__}: upgrade PySpark, or use what the message suggests instead"
        )


if PYSPARK_VERSION < MINIMUM_VERSION:  # pragma: no cover - refused at import
    raise ImportError(f"clients.spark supports PySpark 3.5 and newer; this is PySpark {pyspark.__version__}")


_ZONED = "timezone" in inspect.signature(to_arrow_schema).parameters


def arrow_schema(schema: StructType) -> pa.Schema:
    """``schema`` as the Arrow schema Spark exchanges with Python, timestamps in UTC (PySpark 4
    asks for the zone of ``TimestampType``; 3.5 takes UTC itself)."""
    return to_arrow_schema(schema, timezone="UTC") if _ZONED else to_arrow_schema(schema)


def is_connect(obj: DataFrame | SparkSession) -> bool:
    """Whether a DataFrame or session belongs to Spark Connect (no JVM in this process)."""
    return type(obj).__module__.startswith("pyspark.sql.connect")


def active_session() -> SparkSession:
    """The active session of this thread (classic or Connect)."""
    session = SparkSession.getActiveSession()
    if session is None:
        raise RuntimeError("statestore lookups need an active SparkSession: create one before planning")
    return session


def conf_value(session: SparkSession, key: str) -> str | None:
    """A Spark conf value of the session, ``None`` when unset (classic and Connect alike)."""
    value = session.conf.get(key, None)
    return value if value else None


def conf_values(session: SparkSession, keys: list[str]) -> dict[str, str | None]:
    """Spark conf values of the session, ``None`` when unset: under Spark Connect in one round trip
    (each ``conf.get`` is one), the server answering each key as it answers it alone (a key or
    value its redaction pattern matches reads as unset)."""
    if not is_connect(session) or not keys:
        return {key: conf_value(session, key) for key in keys}
    from pyspark.sql.connect import proto  # noqa: PLC0415  # the Connect client's, when it is one

    pairs = [proto.KeyValue(key=key) for key in keys]  # no value: the default is unset
    operation = proto.ConfigRequest.Operation(
        get_with_default=proto.ConfigRequest.GetWithDefault(pairs=pairs)
    )
    answered = dict(session.client.config(operation).pairs)
    return {key: answered.get(key) or None for key in keys}


def parse_struct(session: SparkSession, ddl: str) -> StructType:
    """A DDL struct (``"name string, price double"``) as a ``StructType``.

    ``StructType.fromDDL`` exists from PySpark 4.0; before, the session parses it (an empty
    DataFrame with that schema), which works on classic and Connect sessions alike. Either asks
    Spark (a round trip to the Connect server or the JVM, tens of milliseconds under load, paid by
    every lookup planned); a DDL string parses the same every time, so each is asked once per
    process and session kind (a copy is answered: a ``StructType`` can be changed in place).
    """
    parsed = _parsed_ddl(is_connect(session), ddl, session)
    return StructType.fromJson(parsed.jsonValue())


_PARSED: dict[tuple[bool, str], StructType] = {}
_PARSED_MAX = 256  # distinct DDL strings kept; a process rarely plans more than a few


def _parsed_ddl(connect: bool, ddl: str, session: SparkSession) -> StructType:
    parsed = _PARSED.get((connect, ddl))
    if parsed is None:
        parsed = _parse_struct(session, ddl)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[(connect, ddl)] = parsed
    return parsed


def _parse_struct(session: SparkSession, ddl: str) -> StructType:
    try:
        if hasattr(StructType, "fromDDL"):
            parsed: Any = StructType.fromDDL(ddl)
        else:
            parsed = session.createDataFrame([], ddl).schema
    except Exception as exc:  # Spark raises parse errors of several JVM- or server-backed types
        raise SchemaMismatchError(
            f"value_schema {ddl!r} is not a Spark DDL struct, e.g. 'name string, price double'"
        ) from exc
    if not isinstance(parsed, StructType):
        raise SchemaMismatchError(f"value_schema {ddl!r} must describe a struct of fields")
    return parsed


class Counter(Protocol):
    """Where tasks count values that did not fit the schema (a Spark accumulator)."""

    def add(self, term: int) -> None: ...

    @property
    def value(self) -> int: ...


def new_counter(session: SparkSession) -> Counter | None:
    """An accumulator on a classic session; ``None`` under Spark Connect, which has none."""
    if is_connect(session):
        return None
    accumulator: Counter = session.sparkContext.accumulator(0)
    return accumulator


def can_observe(df: DataFrame) -> bool:
    """Whether ``DataFrame.observe`` with an ``Observation`` works here (Connect has it from 4.0)."""
    return not is_connect(df) or PYSPARK_VERSION >= (4, 0)


def new_observation() -> Any:
    """A fresh ``Observation`` (classic or Connect, whichever the active mode is)."""
    from pyspark.sql import Observation  # noqa: PLC0415  # the classic or Connect one, per the mode

    return Observation()


def has_arrow_udf() -> bool:
    """Whether vectorized UDFs can take and return Arrow arrays directly (PySpark 4.1 and newer)."""
    try:
        from pyspark.sql.pandas.functions import ArrowUDFType, arrow_udf  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def has_python_data_source() -> bool:
    """Whether ``spark.read.format(...)`` can read a Python data source (PySpark 4.0 and newer)."""
    return PYSPARK_VERSION >= (4, 0)
