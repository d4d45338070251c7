"""Times a read is asked as of, from the query and from a JSON body (``service.times``)."""

from __future__ import annotations

import pytest

from service.times import TimeSyntaxError, parse_json_time, parse_time


def test_query_times_are_epoch_ms_or_rfc3339() -> None:
    assert parse_time("1795168800000") == 1_795_168_800_000
    assert parse_time("2026-11-20T10:00:00.1239Z") == 1_795_168_800_123
    with pytest.raises(TimeSyntaxError):
        parse_time("2026-02-30T10:00:00Z")


def test_json_times_take_integral_numbers_only() -> None:
    assert parse_json_time(1_795_168_800_000) == 1_795_168_800_000
    # JSON Schema's integer, which the OpenAPI document names, includes 5.0.
    assert parse_json_time(-1085.0) == -1085
    assert parse_json_time("2026-11-20T10:00:00Z") == 1_795_168_800_000
    for bad in (1.5, True, None, 10**18):
        with pytest.raises(TimeSyntaxError):
            parse_json_time(bad)
