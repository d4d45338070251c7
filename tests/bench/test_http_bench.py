"""The HTTP benchmark's checks of the answers it frames: a broken answer fails the run instead of
counting as fast (pure logic on canned answers)."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pyarrow as pa
import pytest

from bench.http_bench import (
    BATCH,
    CONSTANT,
    _check_arrow_batch,
    _check_constant,
    _check_json_batch,
    _check_value,
    _key,
    _value,
)
from bench.http_load import AnswerError


def _arrow_answer(keys: list[bytes], values: list[bytes | None]) -> bytes:
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _json_answer(values: list[object]) -> bytes:
    return orjson.dumps({"values": values, "absent": [], "position": "0:1"})


KEYS = [_key(i) for i in range(BATCH)]
PRODUCTS = [orjson.loads(_value(i)) for i in range(BATCH)]


def test_correct_answers_pass() -> None:
    _check_constant(CONSTANT)
    _check_value(_value(7))
    _check_json_batch(_json_answer(PRODUCTS))
    _check_arrow_batch(_arrow_answer(KEYS, [_value(i) for i in range(BATCH)]))


@pytest.mark.parametrize(
    ("check", "answer"),
    [
        (_check_constant, b"{}"),
        (_check_value, b'{"id": 7}'),
        (_check_json_batch, _json_answer(PRODUCTS[:-1])),
        (_check_json_batch, _json_answer([*PRODUCTS[:-1], None])),
        (_check_arrow_batch, _arrow_answer(KEYS[:-1], [_value(i) for i in range(BATCH - 1)])),
        (_check_arrow_batch, _arrow_answer(KEYS, [*(_value(i) for i in range(BATCH - 1)), None])),
        (_check_arrow_batch, _arrow_answer(KEYS, [_value(i + 1) for i in range(BATCH)])),
    ],
    ids=["constant", "value", "json-short", "json-absent", "arrow-short", "arrow-null", "arrow-wrong-values"],
)
def test_a_broken_answer_is_an_error(check: Callable[[bytes], None], answer: bytes) -> None:
    with pytest.raises(AnswerError):
        check(answer)
