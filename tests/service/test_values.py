"""JSON batch answers joined from stored bytes say exactly what encoding each value would."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from service.values import BadValues, JsonAnswer
from store.json_values import NOT_JSON_PREFIX

JSON_TEXT = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
).map(orjson.dumps)
STORED = st.lists(st.none() | JSON_TEXT | JSON_TEXT.map(lambda text: b" " + text + b"\n"), max_size=30)


def encoded(values: list[bytes | None], position: str) -> bytes:
    """The answer as a general JSON encoder writes it."""
    document: dict[str, Any] = {
        "values": [None if v is None else orjson.Fragment(v) for v in values],
        "absent": [i for i, v in enumerate(values) if v is None],
        "position": position,
    }
    return orjson.dumps(document)


@given(STORED, st.text(max_size=12))
def test_a_joined_answer_is_the_encoded_one_byte_for_byte(values: list[bytes | None], position: str) -> None:
    keys = [b"k%d" % i for i in range(len(values))]
    answer = JsonAnswer("products", "json", "utf8", BadValues())
    assert answer.batch(keys, values, position) == encoded(values, position)


def test_a_marked_value_is_an_error_entry_and_the_rest_are_answered() -> None:
    counted: list[str] = []
    answer = JsonAnswer("products", "json", "utf8", BadValues(counted.append))
    body = orjson.loads(answer.batch([b"a", b"b", b"c"], [b"[1]", NOT_JSON_PREFIX + b"{bad", None], "0:3"))
    assert body["values"] == [[1], None, None]
    assert body["absent"] == [2]
    assert [(e["index"], e["key"], e["status"]) for e in body["errors"]] == [(1, "b", 502)]
    assert body["errors"][0]["type"] == "urn:statestore:problem:value-not-json"
    assert counted == ["products"]
