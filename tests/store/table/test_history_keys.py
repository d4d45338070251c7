"""How a version is stored: its value, time, and the key schema id of a record under a natural key."""

from __future__ import annotations

import pytest

from store.table.history_keys import answer_of, parse_version_value, schema_id_of, version_value


@pytest.mark.parametrize("value", [b"v", b"", b"\x00\x01\x02\x03", None])
@pytest.mark.parametrize("schema_id", [None, 0, 7, 2**31 - 1])
def test_a_version_gives_back_its_value_time_and_key_schema_id(
    value: bytes | None, schema_id: int | None
) -> None:
    stored = version_value(value, 1_700_000_000_123, schema_id)
    assert answer_of(stored) == value
    assert parse_version_value(stored) == (value, 1_700_000_000_123)
    assert schema_id_of(stored) == schema_id


def test_a_version_without_a_key_schema_id_is_stored_as_before() -> None:
    # Copies of stores with keys as they are keep their versions byte for byte.
    assert version_value(b"v", 5) == b"\x01" + (5).to_bytes(8, "big") + b"v"
    assert version_value(None, 5) == b"\x00" + (5).to_bytes(8, "big")
