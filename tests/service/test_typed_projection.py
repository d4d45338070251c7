"""``fields=`` on the typed Arrow answers of a store decoding at ingest: the stored documents are
parsed straight into the projected struct (not projected one by one first), and the answer is the
one projecting each value first gives: the JSON answer's projected values, typed. The answer stays
bounded by ``limits.max_answer_bytes``: counted as stored while the stored values fit it, read again
and counted as projected past that, refused when they pass it so too. Work is counted (keys read,
values projected one by one), never timed."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from clients.value_decoding import decode_json
from service.projection import Projection
from store import IndexSpec
from store.formats import undecodable
from tests.service.conftest import Service, assert_problem
from tests.service.test_answers import CountingStore
from tests.service.test_batch_get import ARROW, arrow_body, arrow_stream, read_arrow

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Customer",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "city", "type": ["null", "string"]},
        {"name": "score", "type": "double"},
        {"name": "tags", "type": {"type": "map", "values": "int"}},  # left out of the struct
        {
            "name": "address",
            "type": {
                "type": "record",
                "name": "Address",
                "fields": [{"name": "street", "type": "string"}, {"name": "zip", "type": "string"}],
            },
        },
        {"name": "pad", "type": "string"},
    ],
}
ADA = {
    "id": 1,
    "name": "Ada",
    "city": "London",
    "score": 2.5,
    "tags": {"a": 1},
    "address": {"street": "Main", "zip": "N1"},
    "pad": "x" * 200,
}
# Stored documents as a store decoding at ingest keeps them, and the shapes a read may meet: nulls,
# missing fields, a field whose type changed (in a field asked, and in one not asked), a value that
# is not an object, one the store could not decode, and an absent key.
DOCUMENTS: dict[str, bytes] = {
    "k01": orjson.dumps(ADA),
    "k02": orjson.dumps({**ADA, "id": 2, "city": None, "address": None}),
    "k03": orjson.dumps({"id": 3, "name": "Bo"}),
    "k04": orjson.dumps({**ADA, "id": 4, "score": "not a number"}),
    "k05": orjson.dumps({**ADA, "id": "five"}),
    "k06": orjson.dumps({**ADA, "id": 6, "address": {"street": "Side"}, "name": None}),
    "k07": b"[1, 2]",
    "k08": undecodable("unknown-schema: schema id 999 is not registered"),
    "k09": orjson.dumps({**ADA, "id": 9, "extra": {"nested": [1, 2]}}),
    "k10": orjson.dumps({**ADA, "id": 10, "address": "not an object"}),
}
ASKED = ["k01", "k02", "absent", "k03", "k04", "k05", "k06", "k07", "k08", "k09", "k10", "k01"]
BATCH_URL = "/v1/stores/customers/keys:batchGet"
INDEX_URL = "/v1/stores/customers/indexes/by_city:batchGet"


@pytest.fixture
def projected_one_by_one(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the values the service projects one by one (``Projection.values``); the service
    runs in this process."""
    counted: list[int] = []
    values = Projection.values

    def counting(self: Projection, stored: Sequence[bytes | None]) -> list[bytes | None]:
        counted.append(len(stored))
        return values(self, stored)

    monkeypatch.setattr(Projection, "values", counting)
    return counted


def customers_service(
    make_service: Callable[..., Service], state_dir: Path, documents: dict[str, bytes], **limits: int
) -> tuple[Service, CountingStore]:
    """An ``avro`` store of ``documents`` as stored (indexed ``by_city``) whose latest schema is
    ``SCHEMA``, served under ``limits``."""
    store = CountingStore("customers", indexes=[IndexSpec("by_city", "city")])
    store.apply([(0, i, key.encode(), value) for i, (key, value) in enumerate(documents.items())])
    schemas = state_dir / "customers.schemas"
    schemas.mkdir(parents=True)
    (schemas / "latest.json").write_text(json.dumps({"id": 1, "schema": {"schema": json.dumps(SCHEMA)}}))
    config = {"name": "customers", "topic": "customers", "value_format": "avro"}
    service = make_service(
        stores={"customers": store},
        configs=[{**config, "indexes": [{"name": "by_city", "field": "city"}]}],
        state_dir=state_dir,
        schema_registry={"url": "http://127.0.0.1:9"},  # never asked: the latest schema is kept
        limits=limits,
    )
    return service, store


@pytest.fixture
def customers(make_service: Callable[..., Service], tmp_path: Path) -> tuple[Service, CountingStore]:
    return customers_service(make_service, tmp_path / "state", DOCUMENTS)


def arrow_batch(service: Service, keys: list[str], **params: str) -> pa.Table:
    answer = service.client.post(
        BATCH_URL,
        params=params,
        content=arrow_body(pa.array([key.encode() for key in keys])),
        headers={"content-type": ARROW},
    )
    assert answer.status_code == 200, answer.text
    return read_arrow(answer.content)


def typed_json_answer(
    service: Service, keys: list[str], fields: str, struct: pa.StructType
) -> tuple[Any, Any]:
    """The JSON answer of the same batch (each value projected), typed into ``struct`` as the
    Arrow answer types the values: the values, and which rows are errors or do not fit."""
    answer = service.client.post(BATCH_URL, params={"fields": fields}, json={"keys": keys}).json()
    errors = {entry["index"] for entry in answer["errors"]}
    documents = [None if value is None else orjson.dumps(value) for value in answer["values"]]
    values, misfits = decode_json(pa.array(documents, pa.binary()), struct)
    bad = [i in errors or misfit for i, misfit in enumerate(misfits.to_pylist())]
    return values.to_pylist(), bad


@pytest.mark.parametrize(
    "fields", ["name,city", "city,name,id", "score", "address", "id,nope", "tags", "name,address.zip"]
)
def test_a_projected_typed_answer_is_the_json_answers_projection_typed(
    customers: tuple[Service, CountingStore], projected_one_by_one: list[int], fields: str
) -> None:
    service, _ = customers
    table = arrow_batch(service, ASKED, fields=fields)
    struct = table.schema.field("value").type
    assert [field.name for field in struct] == list(dict.fromkeys(f.split(".")[0] for f in fields.split(",")))
    values, bad = typed_json_answer(service, ASKED, fields, struct)
    assert table.column("value").to_pylist() == values
    errors = table.column("error").to_pylist()
    assert [error is not None for error in errors] == bad
    assert errors[ASKED.index("k08")] == "urn:statestore:problem:unknown-schema"
    flat = "." not in fields
    # Top-level fields: parsed from the stored documents, none projected one by one (the JSON
    # answer above projects its 11 distinct values). A dotted path: projected first, as there.
    assert projected_one_by_one == ([11] if flat else [11, 11])


def test_top_level_fields_of_the_typed_answer_are_the_whole_answers_fields(
    customers: tuple[Service, CountingStore],
) -> None:
    service, _ = customers
    whole = arrow_batch(service, ASKED)
    projected = arrow_batch(service, ASKED, fields="city,id,name")
    pairs = zip(
        whole.column("value").to_pylist(),
        whole.column("error").to_pylist(),
        projected.column("value").to_pylist(),
        projected.column("error").to_pylist(),
        strict=True,
    )
    for key, (value, error, narrow, narrow_error) in zip(ASKED, pairs, strict=True):
        if error is None:  # a value the whole struct types: its fields, as they are there
            assert narrow_error is None
            assert narrow == (None if value is None else {n: value[n] for n in ("city", "id", "name")}), key
    # A value not fitting the whole struct: only the fields asked decide whether it fits.
    by_key = dict(
        zip(
            ASKED,
            zip(projected.column("value").to_pylist(), projected.column("error").to_pylist(), strict=True),
            strict=True,
        )
    )
    assert by_key["k04"] == ({"city": "London", "id": 4, "name": "Ada"}, None)  # score is not asked
    assert by_key["k05"] == (None, "urn:statestore:problem:value-undecodable")  # id is
    assert by_key["k08"] == (None, "urn:statestore:problem:unknown-schema")


def test_the_typed_index_answer_parses_its_rows_as_stored_too(
    customers: tuple[Service, CountingStore], projected_one_by_one: list[int]
) -> None:
    service, _ = customers
    answer = service.client.post(
        INDEX_URL,
        params={"fields": "id,name"},
        content=arrow_stream({"value": pa.array(["London", "Paris"])}),
        headers={"content-type": ARROW},
    )
    table = read_arrow(answer.content)
    rows = table.column("row").to_pylist()
    assert table.column("key").to_pylist()[:2] == [b"k01", b"k04"]
    assert rows[:2] == [{"id": 1, "name": "Ada"}, {"id": 4, "name": "Ada"}]
    assert rows[-1] is None  # Paris: no match
    assert projected_one_by_one == []


PADDED = {f"p{i:03}": orjson.dumps({**ADA, "id": i, "pad": "x" * 4000}) for i in range(100)}
"""100 values of about 4 KB each, 37 bytes each as projected to ``id,name``."""


@pytest.fixture
def padded(make_service: Callable[..., Service], tmp_path: Path) -> tuple[Service, CountingStore]:
    """``PADDED`` under a 64 KiB answer bound: 16 values fit it as stored, all 100 as projected."""
    return customers_service(make_service, tmp_path / "state", PADDED, max_answer_bytes=64 * 1024)


def test_values_fitting_the_bound_as_stored_are_read_once_and_parsed_as_stored(
    padded: tuple[Service, CountingStore], projected_one_by_one: list[int]
) -> None:
    service, store = padded
    keys = list(PADDED)[:10]
    table = arrow_batch(service, keys, fields="id,name")
    assert table.column("value").to_pylist() == [{"id": i, "name": "Ada"} for i in range(10)]
    assert (store.keys_read, projected_one_by_one) == (10, [])


def test_values_past_the_bound_as_stored_are_read_again_and_counted_as_projected(
    padded: tuple[Service, CountingStore], projected_one_by_one: list[int]
) -> None:
    service, store = padded
    keys = list(PADDED)
    assert_problem(  # whole values pass the bound
        service.client.post(
            BATCH_URL,
            content=arrow_body(pa.array([k.encode() for k in keys])),
            headers={"content-type": ARROW},
        ),
        413,
        "answer-too-large",
    )
    store.keys_read = 0
    table = arrow_batch(service, keys, fields="id,name")
    assert table.column("value").to_pylist() == [{"id": i, "name": "Ada"} for i in range(100)]
    assert table.column("error").null_count == 100
    # Read as stored (past the bound), then again, projected one by one and counted so.
    assert (store.keys_read, projected_one_by_one) == (200, [100])
    assert (
        read_arrow(
            service.client.post(
                INDEX_URL,
                params={"fields": "id"},
                content=arrow_stream({"value": pa.array(["London"])}),
                headers={"content-type": ARROW},
            ).content
        ).num_rows
        == 100
    )


def test_an_answer_too_large_even_as_projected_is_refused(
    make_service: Callable[..., Service], tmp_path: Path, projected_one_by_one: list[int]
) -> None:
    service, store = customers_service(make_service, tmp_path / "state", PADDED, max_answer_bytes=1024)
    keys = [k.encode() for k in PADDED]
    for url, body, params in (
        (BATCH_URL, arrow_body(pa.array(keys)), {"fields": "id,name"}),
        (INDEX_URL, arrow_stream({"value": pa.array(["London"])}), {"fields": "id,name"}),
    ):
        refused = service.client.post(url, params=params, content=body, headers={"content-type": ARROW})
        assert assert_problem(refused, 413, "answer-too-large")["limit"] == 1024
    # The batch: 100 values as stored, then those of one chunk projected until past the bound.
    assert store.keys_read == 200
    assert projected_one_by_one[0] == 100
