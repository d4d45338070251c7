"""The load generator of the HTTP benchmarks: equally lean clients for every contender.

Every contender sends prebuilt request bytes over keep-alive connections on one uvloop loop and
only frames the answers: an HTTP answer's status line, head and body (``Content-Length`` or
chunked), a Redis answer by ``hiredis.Reader``. Nothing is parsed while the clock runs; a
contender's keys/s count the keys its requests asked. So that a broken answer cannot count as
fast, the first answer of every connection in every slice is kept and checked once the slice's
time is up (``check``), outside the measured time.

Not a benchmark itself (no ``_bench`` suffix): ``bench/http_bench.py`` and the scale benches use it.
"""

from __future__ import annotations

import asyncio
import math
import socket
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

import hiredis
import uvloop

T = TypeVar("T")
RequestSource = Sequence[bytes] | Callable[[int], bytes]
BatchSource = Sequence[list[bytes]] | Callable[[int], list[bytes]]
Check = Callable[[bytes], object]

SLICE_SECONDS = 0.5
HEAD_END = b"\r\n\r\n"


class Slice(NamedTuple):
    """What one contender did in one slice: answers, their latencies (s), and the seconds it ran."""

    answers: int
    latencies: list[float]
    seconds: float


Load = Callable[[float], Slice]


class AnswerError(RuntimeError):
    """An answer that is not the one a correct server gives."""


def _nth(source: Sequence[T] | Callable[[int], T]) -> Callable[[int], T]:
    """The n-th item to send: a sequence round-robin, or what a callable builds for ``n``."""
    if callable(source):
        return source
    return lambda n: source[n % len(source)]


# -- HTTP framing ---------------------------------------------------------------------------------


def body_length(head: bytes) -> int | None:
    """The body length an answer's head announces; ``None`` for a chunked body.

    Raises ``AnswerError`` for any status other than 200 and for a head that announces neither.
    """
    if head[9:12] != b"200":
        raise AnswerError(f"unexpected answer: {head[:200]!r}")
    lowered = head.lower()
    at = lowered.find(b"\r\ncontent-length:")
    if at >= 0:
        start = at + 17
        return int(lowered[start : lowered.index(b"\r\n", start)])
    if b"\r\ntransfer-encoding: chunked\r\n" in lowered + b"\r\n":
        return None
    raise AnswerError(f"an answer with neither Content-Length nor a chunked body: {head[:200]!r}")


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    """The body of a chunked answer, its trailer read and dropped."""
    parts = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass  # a trailer field
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    """One whole HTTP answer framed (not parsed): its body."""
    length = body_length(await reader.readuntil(HEAD_END))
    if length is None:
        return await read_chunked(reader)
    return await reader.readexactly(length)


async def _open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


async def _http_slice(
    port: int,
    requests: RequestSource,
    seconds: float,
    connections: int,
    check: Check,
    limit: int | None = None,
) -> Slice:
    """Send ``requests`` for ``seconds`` over keep-alive connections, framing the answers; with
    ``limit``, no more than that many requests over all connections (the slice ends at whichever
    comes first).

    A list is sent round-robin, each connection starting at its own place; a callable is asked
    for every request (given its running number on the connection). ``check`` sees each
    connection's first answer once the time is up.
    """
    request_at = _nth(requests)
    opened = [await _open(port) for _ in range(connections)]
    latencies: list[float] = []
    first: list[bytes] = []
    started = time.perf_counter()
    deadline = started + seconds
    ended = [started] * connections
    left = [math.inf if limit is None else limit]

    async def one(number: int) -> None:
        reader, writer = opened[number]
        i = number * 7919
        while time.perf_counter() < deadline and left[0] > 0:
            left[0] -= 1
            request = request_at(i)
            sent = time.perf_counter()
            writer.write(request)
            body = await read_answer(reader)
            latencies.append(time.perf_counter() - sent)
            if i == number * 7919:
                first.append(body)
            i += 1
        ended[number] = time.perf_counter()

    await asyncio.gather(*(one(n) for n in range(connections)))
    spent = max(ended) - started
    for _, writer in opened:
        writer.close()
    for body in first:
        check(body)
    return Slice(len(latencies), latencies, spent)


async def _http_load(
    port: int, requests: RequestSource, seconds: float, connections: int, check: Check
) -> tuple[int, list[float]]:
    """``_http_slice`` as (answers, latencies)."""
    answered = await _http_slice(port, requests, seconds, connections, check)
    return answered.answers, answered.latencies


def _http(port: int, requests: RequestSource, connections: int, check: Check) -> Load:
    return lambda seconds: uvloop.run(_http_slice(port, requests, seconds, connections, check))


# -- Redis ----------------------------------------------------------------------------------------


def mget_request(keys: list[bytes]) -> bytes:
    """The bytes of ``MGET keys...`` in the Redis protocol (RESP)."""
    parts = [b"*%d\r\n$4\r\nMGET\r\n" % (len(keys) + 1)]
    parts += [b"$%d\r\n%s\r\n" % (len(key), key) for key in keys]
    return b"".join(parts)


def check_mget(reply: object, asked: int) -> None:
    """An ``MGET`` reply holds a value for each of the ``asked`` keys."""
    if not isinstance(reply, list) or len(reply) != asked or None in reply:
        raise AnswerError(f"an MGET reply without a value for each of the {asked} keys asked")


async def _redis_slice(port: int, batches: BatchSource, seconds: float, connections: int) -> Slice:
    """``MGET`` of ``batches`` (a list round-robin, or what a callable builds) for ``seconds`` on
    ``connections``, replies framed by ``hiredis.Reader``."""
    if callable(batches):
        request_at: Callable[[int], tuple[bytes, int]] = lambda n: (  # noqa: E731
            mget_request(keys := batches(n)),
            len(keys),
        )
    else:
        prebuilt = [(mget_request(keys), len(keys)) for keys in batches]
        request_at = _nth(prebuilt)
    opened = [await _open(port) for _ in range(connections)]
    latencies: list[float] = []
    first: list[tuple[object, int]] = []
    started = time.perf_counter()
    deadline = started + seconds
    ended = [started] * connections

    async def one(number: int) -> None:
        reader, writer = opened[number]
        parser = hiredis.Reader()
        i = number * 13
        while time.perf_counter() < deadline:
            request, asked = request_at(i)
            sent = time.perf_counter()
            writer.write(request)
            while (reply := parser.gets()) is False:
                parser.feed(await reader.read(1 << 18))
            if reply.__class__ is not list:  # an error reply: as an HTTP status other than 200
                raise AnswerError(f"unexpected MGET reply: {str(reply)[:200]}")
            latencies.append(time.perf_counter() - sent)
            if i == number * 13:
                first.append((reply, asked))
            i += 1
        ended[number] = time.perf_counter()

    await asyncio.gather(*(one(n) for n in range(connections)))
    spent = max(ended) - started
    for _, writer in opened:
        writer.close()
    for reply, asked in first:
        check_mget(reply, asked)
    return Slice(len(latencies), latencies, spent)


def _redis(port: int, batches: BatchSource, connections: int) -> Load:
    return lambda seconds: uvloop.run(_redis_slice(port, batches, seconds, connections))


# -- interleaving ---------------------------------------------------------------------------------


def _interleaved(contenders: dict[str, Load], seconds: float) -> dict[str, tuple[float, list[float]]]:
    """Run the contenders in alternating half-second slices for ``seconds`` each.

    Interleaving finely makes every contender see the same background load, so their ratio holds
    even when the machine is busy. Returns (answers/s, sorted latencies) per contender; the rate
    is over the seconds its slices ran, timed from when its connections were open.
    """
    counts = dict.fromkeys(contenders, 0)
    spent = dict.fromkeys(contenders, 0.0)
    latencies: dict[str, list[float]] = {name: [] for name in contenders}
    slices = max(1, round(seconds / SLICE_SECONDS))
    for _ in range(slices):
        for name, load in contenders.items():
            answered = load(SLICE_SECONDS)
            counts[name] += answered.answers
            spent[name] += answered.seconds
            latencies[name] += answered.latencies
    return {
        name: (counts[name] / spent[name] if spent[name] else math.nan, sorted(latencies[name]))
        for name in contenders
    }
