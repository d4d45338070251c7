"""The scale bench's cold key stream: no key twice, unless a smoke run asks for it."""

from __future__ import annotations

import pytest

from bench.scale_data import BATCH, FreshKeys, FreshKeysExhaustedError


def test_cold_keys_never_come_back() -> None:
    stream = FreshKeys(3 * BATCH)
    batches = [stream.batch() for _ in range(3)]
    asked = [key for batch in batches for key in batch]
    assert len(set(asked)) == len(asked) == 3 * BATCH
    with pytest.raises(FreshKeysExhaustedError, match="3,000 keys"):
        stream.batch()
    assert stream.asked == 3 * BATCH
    assert not stream.repeated


def test_a_smoke_run_may_let_them_start_over() -> None:
    stream = FreshKeys(2 * BATCH, repeat=True)
    first = stream.batch()
    stream.batch()
    assert stream.batch() == first
    assert stream.repeated
