"""Stored keys and natural keys, both ways, for the number key formats and text."""

from __future__ import annotations

import pyarrow as pa
import pytest

from clients.natural_keys import KeyFormatError, natural_key_texts, stored_key, stored_key_array


@pytest.mark.parametrize("key_format", ["long", "int"])
def test_number_keys_read_back_as_the_decimal_text_they_were_asked_by(key_format: str) -> None:
    numbers = [0, 1, -1, 42, 2**31 - 1, -(2**31)]
    stored = stored_key_array(pa.array(numbers, pa.int64()), key_format).to_pylist()
    assert stored == [stored_key(n, key_format) for n in numbers]
    assert natural_key_texts(stored, key_format).to_pylist() == [str(n) for n in numbers]


def test_a_stored_key_of_the_wrong_length_is_an_error_not_a_number() -> None:
    with pytest.raises(KeyFormatError, match="not 8 bytes"):
        natural_key_texts([stored_key(1, "long"), b"\x00\x01"], "long")


def test_other_keys_read_back_as_utf8_text_and_refuse_what_is_not() -> None:
    assert natural_key_texts([b"c1", "zoë".encode()], "bytes").to_pylist() == ["c1", "zoë"]
    with pytest.raises(pa.ArrowInvalid):
        natural_key_texts([b"\xff"], "string")
