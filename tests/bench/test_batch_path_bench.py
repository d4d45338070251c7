"""The lean clients of the batch-path bench frame answers exactly: an answer counted is a whole one,
however the bytes arrive, and Redis's answers are framed by hiredis from a prebuilt ``MGET``."""

from __future__ import annotations

import asyncio

import hiredis

from bench.batch_path_bench import _HttpLean, _mget, _RedisLean


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True


def _connected(kind: type[_HttpLean] | type[_RedisLean]) -> tuple[_HttpLean | _RedisLean, Transport]:
    loop = asyncio.new_event_loop()
    try:
        protocol = kind([b"request"], 0, loop.create_future(), float("inf"))
    finally:
        loop.close()
    transport = Transport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, transport


def test_http_answers_are_counted_whole_however_they_arrive() -> None:
    protocol, transport = _connected(_HttpLean)
    answer = b'HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n{"values":1}'
    stream = answer * 3
    for start in range(0, len(stream), 7):  # split anywhere, heads and bodies alike
        protocol.data_received(stream[start : start + 7])
    assert protocol.answers == 3
    assert len(transport.written) == 4  # the first request, then one after each answer


def test_a_prebuilt_mget_is_one_redis_command_and_its_answer_one_reply() -> None:
    request = _mget([b"a", b"bc"])
    reader = hiredis.Reader()
    reader.feed(request)
    assert reader.gets() == [b"MGET", b"a", b"bc"]
    protocol, _ = _connected(_RedisLean)
    reply = b"*2\r\n$1\r\nx\r\n$-1\r\n"
    protocol.data_received(reply[:5])
    assert protocol.answers == 0
    protocol.data_received(reply[5:])
    assert protocol.answers == 1
