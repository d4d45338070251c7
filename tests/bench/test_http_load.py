"""The HTTP benchmarks' load generator: answers framed (not parsed) from canned bytes, Redis
requests and replies, and rates over the seconds each contender ran."""

from __future__ import annotations

import asyncio

import hiredis
import pytest

from bench.http_load import (
    SLICE_SECONDS,
    AnswerError,
    Slice,
    _interleaved,
    body_length,
    check_mget,
    mget_request,
    read_answer,
)


def _framed(data: bytes, answers: int) -> list[bytes]:
    """The bodies of ``answers`` answers read from ``data``, fed in pieces of 7 bytes."""

    async def run() -> list[bytes]:
        reader = asyncio.StreamReader()
        for at in range(0, len(data), 7):
            reader.feed_data(data[at : at + 7])
        reader.feed_eof()
        bodies = [await read_answer(reader) for _ in range(answers)]
        assert await reader.read() == b"", "bytes left after the answers"
        return bodies

    return asyncio.run(run())


def test_answers_with_a_length_and_chunked_answers_are_framed_back_to_back() -> None:
    data = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n"
        b'{"a": "b"}\n'
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4\r\nWiki\r\n6;ext=1\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\nExpires: never\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    )
    assert _framed(data, 3) == [b'{"a": "b"}\n', b"Wikipedia in \r\n\r\nchunks.", b""]


def test_a_status_other_than_200_is_an_error_not_an_answer() -> None:
    with pytest.raises(AnswerError, match="404"):
        body_length(b"HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\n\r\n")


def test_a_head_announcing_no_body_length_is_an_error() -> None:
    with pytest.raises(AnswerError, match="neither"):
        body_length(b"HTTP/1.1 200 OK\r\nx-content-length: 3\r\n\r\n")


def test_the_mget_request_is_the_redis_protocol_of_its_keys() -> None:
    parser = hiredis.Reader()
    parser.feed(mget_request([b"p1", b"key two"]))
    assert parser.gets() == [b"MGET", b"p1", b"key two"]


def test_an_mget_reply_needs_a_value_for_every_key_asked() -> None:
    check_mget([b"1", b"2"], 2)
    for reply in ([b"1"], [b"1", None], b"1"):
        with pytest.raises(AnswerError):
            check_mget(reply, 2)


def test_rates_are_over_the_seconds_each_contender_ran() -> None:
    slices = 4
    ran = {"fast": Slice(30, [0.002, 0.001], SLICE_SECONDS), "short": Slice(5, [], SLICE_SECONDS / 5)}
    calls = dict.fromkeys(ran, 0)

    def load(name: str) -> object:
        def run(seconds: float) -> Slice:
            assert seconds == SLICE_SECONDS
            calls[name] += 1
            return ran[name]

        return run

    rates = _interleaved({name: load(name) for name in ran}, slices * SLICE_SECONDS)  # type: ignore[misc]
    assert calls == {"fast": slices, "short": slices}
    assert rates["fast"] == (30 / SLICE_SECONDS, [0.001] * slices + [0.002] * slices)
    assert rates["short"] == (5 / (SLICE_SECONDS / 5), [])
