"""``prefix_upper_bound``: the exclusive end of a prefix range, including prefixes of 0xff bytes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from store.table.snapshot_reader import prefix_upper_bound

# Bytes near the edges make prefixes ending in 0xff (and keys around them) likely.
edge_bytes = st.binary(max_size=4).map(lambda b: bytes(x if x % 3 else 0xFF for x in b))
any_bytes = st.one_of(edge_bytes, st.binary(max_size=6))


def test_known_bounds() -> None:
    assert prefix_upper_bound(b"a") == b"b"
    assert prefix_upper_bound(b"ab") == b"ac"
    assert prefix_upper_bound(b"a\xff") == b"b"
    assert prefix_upper_bound(b"a\xff\xff") == b"b"
    assert prefix_upper_bound(b"\x00") == b"\x01"
    assert prefix_upper_bound(b"a\xfe") == b"a\xff"


def test_prefixes_of_only_0xff_bytes_have_no_upper_bound() -> None:
    assert prefix_upper_bound(b"") is None
    assert prefix_upper_bound(b"\xff") is None
    assert prefix_upper_bound(b"\xff\xff\xff") is None


@given(any_bytes, any_bytes)
def test_a_key_is_below_the_bound_exactly_when_it_is_at_or_after_the_prefix_and_starts_with_it(
    prefix: bytes, key: bytes
) -> None:
    upper = prefix_upper_bound(prefix)
    in_range = prefix <= key and (upper is None or key < upper)
    assert in_range == key.startswith(prefix)
