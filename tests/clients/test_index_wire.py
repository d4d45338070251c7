"""Index lookups and ``as_of`` reads on the wire: requests built, answers checked (pure logic)."""

from __future__ import annotations

import base64
import struct

import pyarrow as pa
import pytest

from clients import indexes, wire
from clients.exceptions import UnexpectedResponseError, ValueDecodeError


def arrow_stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def answer(rows: list[tuple[str, bytes | None, bytes | None, bytes | None]]) -> pa.Table:
    columns = [[row[i] for row in rows] for i in range(4)]
    arrays = [
        pa.array(column, field.type) for column, field in zip(columns, indexes.INDEX_ANSWER, strict=True)
    ]
    return pa.table(arrays, schema=indexes.INDEX_ANSWER)


def test_as_of_goes_as_a_parameter_excludes_min_position_and_gets_a_wait_budget() -> None:
    call = wire.get_call("tickers", "AAPL", None, {1: 5, 0: 7})
    assert call.params == {"as_of": "0:7,1:5"}
    assert wire.batch_get_call("tickers", [b"a"], None, "0:3").params == {"as_of": "0:3"}
    scan = wire.scan_call("tickers", "A", None, 10, None, "0:3")
    assert scan.params == {"as_of": "0:3", "limit": "10", "prefix": "A"}
    assert wire.read_params(None, as_of="") == {"as_of": ""}
    with pytest.raises(ValueError, match="not both"):
        wire.read_params("0:1", as_of="0:1")
    assert wire.with_wait_budget({"as_of": "0:3"}, 2.0) == {"as_of": "0:3", "timeout_ms": "1600"}
    assert wire.with_wait_budget({"limit": "1"}, 2.0) == {"limit": "1"}


def test_index_values_compare_as_their_json_text() -> None:
    assert [indexes.index_text(v) for v in ("AAPL", 42, 4.5, True, False)] == [
        "AAPL", "42", "4.5", "true", "false",
    ]  # fmt: skip
    with pytest.raises(TypeError, match="indexed value"):
        indexes.index_text(None)  # type: ignore[arg-type]


def test_index_page_calls_encode_value_cursor_and_position() -> None:
    call = indexes.index_call("positions", "by_ticker", "BRK/B é", b"\xffpos-1", 50, "0:4", None)
    assert call.method == "GET"
    assert call.path == "/v1/stores/positions/indexes/by_ticker/BRK%2FB%20%C3%A9"
    assert call.params["limit"] == "50"
    assert call.params["key_encoding"] == "base64"
    assert base64.urlsafe_b64decode(call.params["after"]) == b"\xffpos-1"
    assert call.params["min_position"] == "0:4"
    exact = indexes.index_call("positions", "by_ticker", "A", None, 5, None, "0:9")
    assert "after" not in exact.params
    assert exact.params["as_of"] == "0:9"


def test_index_batch_call_sends_an_arrow_value_column() -> None:
    call = indexes.index_batch_call("positions", "by_ticker", pa.array(["A", "B"]), 100, None, "0:2")
    assert call.path == "/v1/stores/positions/indexes/by_ticker:batchGet"
    # Stored values: the client decodes the rows itself, a decoded format's struct is not asked for.
    assert call.params == {"as_of": "0:2", "limit_per_value": "100", "values": "stored"}
    assert call.content is not None
    sent = pa.ipc.open_stream(call.content).read_all()
    assert sent.column("value").to_pylist() == ["A", "B"]
    assert sent.schema.field("value").type == pa.string()


def test_index_pages_decode_base64_keys_and_cursors() -> None:
    page = {
        "items": [{"key": base64.b64encode(b"\x00k").decode(), "value": {"ticker": "A"}}],
        "next_after": base64.urlsafe_b64encode(b"\x00k").decode(),
    }
    assert indexes.decode_index_page(page) == ([(b"\x00k", {"ticker": "A"})], b"\x00k")
    assert indexes.decode_index_page({"items": [], "next_after": None}) == ([], None)
    with pytest.raises(UnexpectedResponseError):
        indexes.decode_index_page({"items": [{"value": 1}]})


def test_batch_answers_must_answer_every_value_once_in_order() -> None:
    table = answer([("A", b"p1", b"{}", None), ("A", b"p2", b"{}", b"p2"), ("B", None, None, None)])
    body = arrow_stream(table)
    decoded = indexes.decode_index_batch(body, pa.array(["A", "B"]))
    assert decoded.column("key").to_pylist() == [b"p1", b"p2", None]
    assert indexes.continued_values(decoded) == [("A", b"p2")]
    # A value asked twice is answered once, in the order first asked.
    assert indexes.decode_index_batch(body, pa.array(["A", "B", "A"])).num_rows == 3
    for asked in (["B", "A"], ["A"], ["A", "B", "C"], ["B", "A", "B"]):
        with pytest.raises(UnexpectedResponseError, match="request order"):
            indexes.decode_index_batch(body, pa.array(asked))
    with pytest.raises(UnexpectedResponseError, match="Arrow"):
        indexes.decode_index_batch(b"not arrow", pa.array(["A"]))
    empty = indexes.decode_index_batch(arrow_stream(answer([])), pa.array([], pa.string()))
    assert empty.num_rows == 0


def test_paged_on_rows_join_their_value_and_groups_decode_per_value() -> None:
    table = answer(
        [
            ("A", b"p1", b'{"n":1}', None),
            ("A", b"p2", b'{"n":2}', b"p2"),
            ("B", None, None, None),
            ("C", b"p9", b'{"n":9}', b"p9"),
        ]
    )
    more = {"A": [(b"p3", {"n": 3}), (b"p4", {"n": 4})], "C": [(b"pa", {"n": 10})]}
    full = indexes.with_more_pages(table, more)
    assert full.column_names == ["value", "key", "row"]
    assert full.column("value").to_pylist() == ["A", "A", "A", "A", "B", "C", "C"]
    assert full.column("key").to_pylist() == [b"p1", b"p2", b"p3", b"p4", None, b"p9", b"pa"]
    grouped = indexes.grouped_rows(full, ["C", "B", "A", "C"], ["C", "B", "A", "C"], binary_keys=False)
    assert grouped == {
        "C": [("p9", {"n": 9}), ("pa", {"n": 10})],
        "B": [],
        "A": [("p1", {"n": 1}), ("p2", {"n": 2}), ("p3", {"n": 3}), ("p4", {"n": 4})],
    }
    assert indexes.with_more_pages(table, {}).num_rows == 4
    with pytest.raises(ValueDecodeError, match="binary_keys=True"):
        indexes.row_key(b"\xff", binary_keys=False)
    assert indexes.row_key(b"\xff", binary_keys=True) == b"\xff"


def test_shards_answers_merge_per_value_in_request_order_and_row_key_order() -> None:
    def answer(rows: list[tuple[str, bytes | None]]) -> pa.Table:
        return pa.table(
            {
                "value": [v for v, _ in rows],
                "key": pa.array([k for _, k in rows], pa.binary()),
                "row": pa.array([None if k is None else b"{}" for _, k in rows], pa.binary()),
            }
        )

    first = answer([("B", b"b3"), ("B", b"b9"), ("A", None), ("C", None)])
    second = answer([("B", b"b1"), ("A", b"a5"), ("C", None)])
    merged = indexes.merged_answers([first, second], pa.array(["B", "A", "C"]))
    assert list(zip(merged.column("value").to_pylist(), merged.column("key").to_pylist(), strict=True)) == [
        ("B", b"b1"),
        ("B", b"b3"),
        ("B", b"b9"),
        ("A", b"a5"),
        ("C", None),
    ]


def test_row_keys_of_number_stores_are_answered_as_their_decimal_text() -> None:
    assert indexes.row_key(struct.pack(">q", -42), binary_keys=False, key_format="long") == "-42"
    assert indexes.row_key(struct.pack(">i", 7), binary_keys=False, key_format="int") == "7"
    assert indexes.row_key(struct.pack(">q", 42), binary_keys=True, key_format="long") == struct.pack(
        ">q", 42
    )
    assert indexes.row_key(b"p-1", binary_keys=False, key_format="string") == "p-1"
