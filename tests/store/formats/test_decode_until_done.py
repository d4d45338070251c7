"""Ingest waits while the registry is unavailable, and never skips a value."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from store.formats import decode_until_done, undecodable, undecodable_reason
from store.formats.errors import RegistryUnavailableError


class FlakyCodec:
    """Fails ``failures`` times as an unreachable registry would, then decodes (upper-cases)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0
        self.undecodable_count = 0

    def decode(self, values: Sequence[bytes | None]) -> list[bytes | None]:
        self.calls += 1
        if self.calls <= self.failures:
            raise RegistryUnavailableError(f"registry down ({self.calls})")
        return [None if v is None else v.upper() for v in values]


def test_every_value_is_decoded_once_the_registry_answers_and_each_wait_is_told() -> None:
    codec, told = FlakyCodec(failures=3), []
    decoded = decode_until_done(codec, [b"a", None, b"b"], threading.Event(), told.append, first_wait=0.001)
    assert decoded == [b"A", None, b"B"]
    assert told == ["registry down (1)", "registry down (2)", "registry down (3)"]
    assert codec.calls == 4


def test_a_stop_while_waiting_decides_nothing() -> None:
    stop = threading.Event()
    codec = FlakyCodec(failures=10**9)
    assert decode_until_done(codec, [b"a"], stop, lambda _: stop.set(), first_wait=0.001) is None
    assert codec.calls == 1


def test_an_undecodable_marker_is_never_json_and_keeps_its_reason() -> None:
    marker = undecodable("unknown-schema:no schema id 9")
    assert marker[:1] == b"\x00"
    assert undecodable_reason(marker) == "unknown-schema:no schema id 9"
    assert undecodable_reason(b'{"a": 1}') is None
