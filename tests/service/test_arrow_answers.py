"""Arrow answers written from the stored values' bytes read back as exactly what pyarrow's own
writer writes, for every key type a batch get answers with and every shape of values."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from service.arrow_answers import END_OF_STREAM, batch_answer, ipc_stream
from service.arrow_arrays import binary_array, value_array
from store.json_values import NOT_JSON_PREFIX

INTEGER_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64()]


def _read(stream: bytes) -> pa.Table:
    table = pa.ipc.open_stream(stream).read_all()
    table.validate(full=True)
    return table


def _as_pyarrow_writes(keys: pa.Array, values: list[bytes | None], value_format: str = "bytes") -> pa.Table:
    return _read(ipc_stream(pa.table({"key": keys, "value": value_array(values, value_format)})))


def _values(rows: int, seed: int) -> list[bytes | None]:
    rng = random.Random(seed)
    return [
        None if rng.random() < 0.2 else bytes(rng.randrange(256) for _ in range(rng.randrange(12)))
        for _ in range(rows)
    ]


def _key_columns(rows: int) -> list[pa.Array]:
    keys = [binary_array([b"k%d" % i for i in range(rows)])]
    # A slice: its offsets start past 0 and its numbers past the buffer's start.
    keys.append(binary_array([b"key-%d" % i for i in range(rows + 5)]).slice(3, rows))
    keys += [pa.array([i % 100 for i in range(rows + 2)], t).slice(2, rows) for t in INTEGER_TYPES]
    return keys


@pytest.mark.parametrize("rows", [1, 7, 8, 9, 64, 65, 1000])
def test_an_answer_reads_back_as_pyarrows_for_every_key_type_and_shape_of_values(rows: int) -> None:
    values = _values(rows, rows)
    for keys in _key_columns(rows):
        for shaped in (values, [v or b"" for v in values], [None] * rows, [b""] * rows):
            answer = batch_answer(keys, shaped, "bytes")
            expected = _as_pyarrow_writes(keys, shaped)
            got = _read(answer)
            assert got.equals(expected), (keys.type, rows)
            assert got.schema == expected.schema
            assert got.column("value").null_count == shaped.count(None)
            assert answer.endswith(END_OF_STREAM)


def test_missing_keys_are_null_values_and_empty_values_stay_empty() -> None:
    keys = binary_array([b"p1", b"nope", b"empty", b"p1"])
    table = _read(batch_answer(keys, [b'{"a":1}', None, b"", b'{"a":1}'], "json"))
    assert table.to_pylist() == [
        {"key": b"p1", "value": b'{"a":1}'},
        {"key": b"nope", "value": None},
        {"key": b"empty", "value": b""},
        {"key": b"p1", "value": b'{"a":1}'},
    ]


def test_values_marked_as_no_json_document_are_answered_as_their_producer_wrote_them() -> None:
    keys = binary_array([b"good", b"bad", b"absent"])
    values = [b'{"a":1}', NOT_JSON_PREFIX + b"\x00raw", None]
    table = _read(batch_answer(keys, values, "json"))
    assert table.column("value").to_pylist() == [b'{"a":1}', b"\x00raw", None]
    # Stores of other formats answer their bytes as they are.
    assert _read(batch_answer(keys, values, "bytes")).column("value").to_pylist() == values


def test_an_empty_answer_and_a_key_column_of_another_type_are_written_by_pyarrow() -> None:
    assert _read(batch_answer(binary_array([]), [], "bytes")).num_rows == 0
    text_keys = pa.array(["a", "b"], pa.string())
    table = _read(batch_answer(text_keys, [b"x", None], "bytes"))
    assert table.equals(_as_pyarrow_writes(text_keys, [b"x", None]))


def test_a_key_column_that_does_not_match_the_values_is_refused() -> None:
    with pytest.raises(pa.ArrowInvalid):
        batch_answer(binary_array([b"a", b"b"]), [b"x"], "bytes")
