"""Property-based fuzzing from the app's own OpenAPI description (schemathesis).

Every generated request, valid or not, must get an answer that the description allows: never a
5xx other than the documented 503s, the documented content types and the documented shapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import hypothesis
import pyarrow as pa
import pytest
import schemathesis
from fastapi import FastAPI
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from service.app import create_app
from service.settings import Settings
from store import IndexSpec, InMemoryStore, StoreState
from tests.service.conftest import DEFAULT_STORES, product_store
from tests.support.contract import accepts_valid_requests, follow_the_cross_location_rules
from tests.support.server import serve_app

POSITIONS = {
    "name": "positions",
    "topic": "positions",
    "value_format": "json",
    "indexes": [{"name": "by_ticker", "field": "ticker"}],
    "history": {"retention_offsets": 100},
}


def fuzzed_app() -> FastAPI:
    notes = InMemoryStore("notes", topic="notes-topic")
    notes.apply([(0, 0, b"n1", b"hello")])
    restoring = InMemoryStore("blobs", state=StoreState.RESTORING)
    # An indexed store that keeps history, so index lookups and as_of reads get real answers.
    positions = InMemoryStore("positions", indexes=[IndexSpec("by_ticker", "ticker")], keeps_history=True)
    # Stamped 0 to 9000 ms, so reads as_of_time find values, absent keys and times before any.
    records = [(0, i, f"pos-{i}".encode(), b'{"ticker":"%d"}' % (i % 3)) for i in range(10)]
    positions.apply(records, timestamps=[i * 1000 for i in range(10)])
    settings = Settings(stores=[*DEFAULT_STORES, POSITIONS], limits={"min_position_timeout_seconds": 0.05})
    stores = {"products": product_store(), "notes": notes, "blobs": restoring, "positions": positions}
    return create_app(settings, stores)


def no_unplanned_server_error(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    """Only the documented 503s (store not ready, position not reached, readiness) may be 5xx."""
    status = response.status_code
    assert status < 500 or status == 503, f"server error {status}: {response.text[:500]}"
    return None


@schemathesis.serializer("application/vnd.apache.arrow.stream")
def arrow_keys(ctx: Any, value: Any) -> bytes:
    """Generated payloads become a one-row Arrow stream with that payload as the key and as the
    indexed value (key batches read the ``key`` column, index batches the ``value`` column)."""
    key = value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")
    text = key.decode("utf-8", "replace")
    table = pa.table({"key": pa.array([key], type=pa.binary()), "value": pa.array([text], type=pa.string())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


# The description is the app's own; the requests go to a real uvicorn server running the same app.
schema = schemathesis.openapi.from_dict(fuzzed_app().openapi())


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with serve_app(fuzzed_app()) as url:
        yield url


@schema.parametrize()
@hypothesis.settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck),
    database=None,
)
def test_api_answers_as_described(case: schemathesis.Case, base_url: str) -> None:
    follow_the_cross_location_rules(case)
    case.call_and_validate(
        base_url=base_url,
        # Requests the document forbids need not all be refused: the service ignores query
        # parameters it does not know and a timeout_ms with nothing to wait for, a JSON body's
        # key_encoding replaces the query's, and it counts key lengths in bytes where the document
        # can only state characters. What it refuses, it refuses with a documented problem.
        excluded_checks=[not_a_server_error, positive_data_acceptance, negative_data_rejection],
        additional_checks=[no_unplanned_server_error, accepts_valid_requests],
    )
