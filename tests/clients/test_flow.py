"""The client's flows (retry, batching, paging) fed answers by hand, and the two drivers that run them.

Most tests drive a flow generator directly: they answer each step it yields and check the requests it
asks for and what it returns. The last ones run multi-flow steps through the real sync and async
drivers (against a real uvicorn server where the point is concurrency).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
import pyarrow as pa
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from clients import AsyncStatestoreClient, StatestoreClient, indexes
from clients.exceptions import (
    AnswerTooLargeError,
    DeadlineExceededError,
    ForbiddenError,
    PositionNotReachedError,
    TransportError,
    UnknownStoreError,
)
from clients.flow import Attempt, Emit, Flow, Sleep, Together, Walk, collected, gathered, sent
from clients.options import ClientOptions
from clients.retry import Deadline, RetryPolicy
from clients.wire import POSITION_HEADER, Call
from tests.support.server import serve_app

T = TypeVar("T")
URL = "http://statestore.invalid"
NO_RETRY = RetryPolicy(max_attempts=1)
OPTIONS = ClientOptions(URL, timeout=2.0, retry=RetryPolicy(initial_backoff=0.1, max_backoff=1.0))


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def problem(status: int, slug: str, retry_after: float | None = None) -> httpx.Response:
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    body = {"type": f"urn:statestore:problem:{slug}", "title": slug, "status": status}
    return httpx.Response(status, json=body, headers=headers)


def store_info(name: str, value_format: str = "json") -> httpx.Response:
    body = {"name": name, "value_format": value_format, "state": "READY", "position": "0:1"}
    return httpx.Response(200, json=body)


def arrow_values(values: list[bytes | None]) -> httpx.Response:
    table = pa.table({"value": pa.array(values, pa.binary())})
    return httpx.Response(200, content=arrow_stream(table))


def arrow_stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def sent_keys(attempt: Attempt) -> list[bytes]:
    assert attempt.call.content is not None
    return list(pa.ipc.open_stream(attempt.call.content).read_all().column("key").to_pylist())


class Script:
    """Runs a flow by hand: every attempt is recorded and answered by ``answer``; emitted items kept."""

    def __init__(self, answer: Callable[[Attempt], httpx.Response]) -> None:
        self.answer = answer
        self.attempts: list[Attempt] = []
        self.items: list[Any] = []

    def run(self, flow: Flow[T]) -> T:
        walk = Walk(flow)
        for step in walk:
            if isinstance(step, Attempt):
                self.attempts.append(step)
                walk.reply(self.answer(step))
            elif isinstance(step, Emit):
                self.items.extend(step.items)
            else:
                raise AssertionError(f"unexpected step {step!r}")
        return walk.result


# -- retry -------------------------------------------------------------------------------------------


def test_sent_retries_a_transient_failure_after_retry_after_and_returns_the_success() -> None:
    clock = FakeClock()
    call = Call("GET", "/v1/stores/s/keys/k", {"min_position": "0:5"})
    steps = sent(call, Deadline(5.0, clock=clock), OPTIONS)
    # The position wait is told to end well before the deadline; one attempt never outlasts timeout.
    assert next(steps) == Attempt(call, {"min_position": "0:5", "timeout_ms": "4000"}, 2.0)
    pause = steps.send(problem(503, "store-not-ready", retry_after=0.3))
    assert pause == Sleep(0.3)  # jitter is at most 0.1 here: the service's Retry-After wins
    clock.now += 0.3
    again = steps.send(None)
    assert isinstance(again, Attempt)
    assert again.params["timeout_ms"] == "3760"
    success = httpx.Response(200, content=b"v")
    with pytest.raises(StopIteration) as done:
        steps.send(success)
    assert done.value.value is success


def test_sent_raises_a_refusal_at_once_and_gives_up_when_attempts_or_deadline_run_out() -> None:
    steps = sent(Call("GET", "/v1/stores/nope"), Deadline(5.0, clock=FakeClock()), OPTIONS)
    next(steps)
    with pytest.raises(UnknownStoreError):
        steps.send(problem(404, "unknown-store"))

    twice = ClientOptions(URL, retry=RetryPolicy(initial_backoff=0.0, max_attempts=2))
    steps = sent(Call("GET", "/v1/stores"), Deadline(5.0, clock=FakeClock()), twice)
    next(steps)
    refused = httpx.ConnectError("connection refused")
    assert steps.send(refused) == Sleep(0.0)
    next(steps)
    with pytest.raises(
        TransportError, match=re.escape("GET http://statestore.invalid/v1/stores failed")
    ) as caught:
        steps.send(refused)
    assert caught.value.__cause__ is refused

    clock = FakeClock()
    steps = sent(
        Call("GET", "/v1/stores/s/keys/k", {"min_position": "0:9"}), Deadline(1.0, clock=clock), OPTIONS
    )
    next(steps)
    clock.now += 1.0  # the attempt took the whole deadline: no retry can fit
    with pytest.raises(DeadlineExceededError) as late:
        steps.send(problem(503, "position-not-reached"))
    assert isinstance(late.value.last_error, PositionNotReachedError)


# -- batching ----------------------------------------------------------------------------------------


def test_get_arrow_sends_batches_of_at_most_batch_size_in_order_and_joins_the_answers() -> None:
    keys = [bytes([i]) for i in range(7)]
    script = Script(
        lambda attempt: arrow_values([None if k == b"\x04" else k * 2 for k in sent_keys(attempt)])
    )
    with StatestoreClient(URL, batch_size=3) as client:
        found = script.run(client._get_arrow_flow("s", pa.array(keys, pa.binary()), {"as_of": "0:9"}))
    assert [sent_keys(a) for a in script.attempts] == [keys[0:3], keys[3:6], keys[6:7]]
    assert {a.call.path for a in script.attempts} == {"/v1/stores/s/keys:batchGet"}
    assert all(a.params["as_of"] == "0:9" for a in script.attempts)
    assert found.to_pylist() == [None if k == b"\x04" else k * 2 for k in keys]


def test_get_many_asks_each_key_once_and_answers_in_request_order_decoded() -> None:
    def answer(attempt: Attempt) -> httpx.Response:
        if attempt.call.method == "GET":
            return store_info("s")
        return arrow_values(
            [None if k == b"b" else json.dumps({"k": k.decode()}).encode() for k in sent_keys(attempt)]
        )

    script = Script(answer)
    with StatestoreClient(URL, batch_size=2) as client:
        found = script.run(client._get_many_flow("s", ["a", "b", "a", b"c", "a"], False, {}))
    assert [a.call.path for a in script.attempts] == ["/v1/stores/s"] + ["/v1/stores/s/keys:batchGet"] * 2
    assert [sent_keys(a) for a in script.attempts[1:]] == [[b"a", b"b"], [b"c"]]
    assert found == [{"k": "a"}, None, {"k": "a"}, {"k": "c"}, {"k": "a"}]


# -- paging ------------------------------------------------------------------------------------------


def scan_pages(pages: dict[str | None, tuple[list[str], str | None, str | None]]) -> Script:
    """A scan answered from ``{after: (keys, next_after, position header)}``."""

    def answer(attempt: Attempt) -> httpx.Response:
        if attempt.call.path == "/v1/stores/s":
            return store_info("s")
        keys, following, position = pages[attempt.params.get("after")]
        body = {"items": [{"key": k, "value": {"k": k}} for k in keys], "next_after": following}
        return httpx.Response(200, json=body, headers={POSITION_HEADER: position} if position else {})

    return Script(answer)


def test_scan_pages_on_from_the_cursor_and_never_reads_older_than_a_page_it_saw() -> None:
    script = scan_pages(
        {None: (["a"], "a", "0:5,1:2"), "a": (["b", "c"], "c", "0:4,1:7"), "c": ([], None, None)}
    )
    with StatestoreClient(URL) as client:
        script.run(client._scan_flow("s", "", None, 2, {"min_position": "0:3"}))
    pages = [a.params for a in script.attempts[1:]]
    assert [p.get("after") for p in pages] == [None, "a", "c"]
    assert [p.get("min_position") for p in pages] == ["0:3", "0:5,1:2", "0:5,1:7"]
    assert script.items == [("a", {"k": "a"}), ("b", {"k": "b"}), ("c", {"k": "c"})]


def test_an_exact_scan_reads_every_page_as_of_the_same_position() -> None:
    script = scan_pages({None: (["a"], "a", "0:9"), "a": (["b"], None, "0:9")})
    with StatestoreClient(URL) as client:
        script.run(client._scan_flow("s", "", None, 1, {"as_of": "0:9"}))
    assert [(a.params.get("as_of"), a.params.get("min_position")) for a in script.attempts[1:]] == [
        ("0:9", None),
        ("0:9", None),
    ]


def test_a_scan_after_a_key_starts_from_that_key_as_the_service_encodes_it() -> None:
    script = scan_pages({"b": (["c"], None, "0:9")})
    with StatestoreClient(URL) as client:
        script.run(client._scan_flow("s", "", "b", 10, {}))
        binary = Script(lambda attempt: httpx.Response(200, json={"items": [], "next_after": None}))
        binary.run(client._scan_flow("s", b"\x00", b"\x00\xff", 10, {}))
    assert [a.params.get("after") for a in script.attempts[1:]] == ["b"]
    assert script.items == [("c", {"k": "c"})]
    assert binary.attempts[0].params["after"] == "AP8="  # base64 of the key, as binary keys travel


def test_index_arrow_pages_on_a_value_beyond_the_batch_at_the_batch_position() -> None:
    batch = pa.table(
        {
            "value": ["NONE", "BIG", "BIG"],
            "key": [None, b"k1", b"k2"],
            "row": [None, b'{"n":1}', b'{"n":2}'],
            "next_after": [None, None, b"k2"],
        },
        schema=indexes.INDEX_ANSWER,
    )
    more = {  # keys go base64: "azI=" is b"k2", "azM=" b"k3", "azQ=" b"k4"
        "azI=": {"items": [{"key": "azM=", "value": {"n": 3}}], "next_after": "azM="},
        "azM=": {"items": [{"key": "azQ=", "value": {"n": 4}}], "next_after": None},
    }

    def answer(attempt: Attempt) -> httpx.Response:
        if attempt.call.method == "POST":
            return httpx.Response(200, content=arrow_stream(batch), headers={POSITION_HEADER: "0:8"})
        return httpx.Response(200, json=more[attempt.params["after"]])

    script = Script(answer)
    with StatestoreClient(URL) as client:
        table = script.run(
            client._index_arrow_flow("p", "by_t", pa.array(["NONE", "BIG"]), {"limit_per_value": 2})
        )
    pages = script.attempts[1:]
    assert [a.call.path for a in pages] == ["/v1/stores/p/indexes/by_t/BIG"] * 2
    assert [a.params["after"] for a in pages] == ["azI=", "azM="]
    assert [a.params["min_position"] for a in pages] == ["0:8", "0:8"]
    assert table.column("value").to_pylist() == ["NONE", "BIG", "BIG", "BIG", "BIG"]
    assert table.column("key").to_pylist() == [None, b"k1", b"k2", b"k3", b"k4"]


def test_index_arrow_halves_a_batch_whose_answer_the_service_finds_too_large() -> None:
    def sent_values(attempt: Attempt) -> list[str]:
        assert attempt.call.content is not None
        return list(pa.ipc.open_stream(attempt.call.content).read_all().column("value").to_pylist())

    def answer(attempt: Attempt) -> httpx.Response:
        values = sent_values(attempt)
        if len(values) > 1 and "BIG" in values:  # rows of BIG and any other value pass the limit
            return problem(413, "answer-too-large")
        rows = {
            "value": values,
            "key": [f"{v}-k".encode() for v in values],
            "row": [b"{}" for _ in values],
            "next_after": [None for _ in values],
        }
        table = pa.table(rows, schema=indexes.INDEX_ANSWER)
        return httpx.Response(200, content=arrow_stream(table), headers={POSITION_HEADER: "0:8"})

    script = Script(answer)
    with StatestoreClient(URL, retry=NO_RETRY) as client:
        table = script.run(client._index_arrow_flow("p", "by_t", pa.array(["A", "B", "BIG", "C"]), {}))
    assert [sent_values(a) for a in script.attempts] == [
        ["A", "B", "BIG", "C"],
        ["A", "B"],
        ["BIG", "C"],
        ["BIG"],
        ["C"],
    ]
    assert table.column("value").to_pylist() == ["A", "B", "BIG", "C"]

    with StatestoreClient(URL, retry=NO_RETRY) as client, pytest.raises(AnswerTooLargeError):
        Script(lambda attempt: problem(413, "answer-too-large")).run(
            client._index_arrow_flow("p", "by_t", pa.array(["BIG"]), {})
        )


def test_streaming_reads_ask_for_a_page_only_when_the_caller_gets_to_it() -> None:
    asked: list[str | None] = []
    pages = {None: (["a"], "a"), "a": (["b"], None)}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/stores/s":
            return store_info("s")
        after = request.url.params.get("after")
        asked.append(after)
        keys, following = pages[after]
        return httpx.Response(
            200, json={"items": [{"key": k, "value": 1} for k in keys], "next_after": following}
        )

    with StatestoreClient(URL, transport=httpx.MockTransport(handler)) as client:
        rows = client.scan("s", "")
        assert asked == []
        assert next(rows) == ("a", 1)
        assert asked == [None]
        assert list(rows) == [("b", 1)]
        assert asked == [None, "a"]


# -- several flows at once ---------------------------------------------------------------------------


def test_an_error_thrown_into_a_collected_flow_reaches_the_flow_inside() -> None:
    def inner() -> Flow[None]:
        try:
            yield Sleep(1.0)
        except KeyError:
            yield Emit(["recovered"])
        yield Emit(["after"])

    outer = collected(inner())
    assert next(outer) == Sleep(1.0)
    with pytest.raises(StopIteration) as done:
        outer.throw(KeyError("lost"))
    assert done.value.value == ["recovered", "after"]


def test_gathered_answers_results_in_order_or_the_first_failure() -> None:
    assert gathered([1, 2]) == [1, 2]
    first, second = UnknownStoreError({}, 404), ForbiddenError({}, 403)
    thrown = gathered([1, first, second])
    assert not isinstance(thrown, list)
    assert thrown.error is first
    with pytest.raises(KeyboardInterrupt):
        gathered([first, KeyboardInterrupt()])


def run_flow(flavour: str, url: str, flow: Callable[[ClientOptions], Flow[T]], **kwargs: Any) -> T:
    """``flow`` run to its end by the sync or the async client's driver."""
    if flavour == "sync":
        with StatestoreClient(url, retry=NO_RETRY, **kwargs) as client:
            return client._run(flow(client.options))

    async def run() -> T:
        async with AsyncStatestoreClient(url, retry=NO_RETRY, **kwargs) as client:
            return await client._run(flow(client.options))

    return asyncio.run(run())


def gather_calls(paths: list[str]) -> Callable[[ClientOptions], Flow[list[Any]]]:
    def flow(options: ClientOptions) -> Flow[list[Any]]:
        deadline = Deadline(options.deadline)
        responses = yield Together(tuple(sent(Call("GET", path), deadline, options) for path in paths))
        return [response.json() for response in responses]

    return flow


def meeting_app(parties: int) -> Starlette:
    """Answers ``GET /meet/{name}`` only once ``parties`` requests are in at the same time."""
    arrived: list[str] = []
    everyone = asyncio.Event()

    async def meet(request: Request) -> JSONResponse:
        arrived.append(request.path_params["name"])
        if len(arrived) == parties:
            everyone.set()
        try:
            await asyncio.wait_for(everyone.wait(), 5.0)
        except TimeoutError:
            detail = f"only {arrived} came; the requests were not sent together"
            return JSONResponse({"type": "urn:statestore:problem:alone", "detail": detail}, status_code=409)
        return JSONResponse({"name": request.path_params["name"], "met": len(arrived)})

    return Starlette(routes=[Route("/meet/{name}", meet)])


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_together_sends_its_requests_concurrently(flavour: str) -> None:
    with serve_app(meeting_app(3)) as url:
        found = run_flow(flavour, url, gather_calls(["/meet/a", "/meet/b", "/meet/c"]))
    assert found == [{"name": name, "met": 3} for name in "abc"]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_together_waits_for_every_flow_and_raises_the_first_failure_inside_the_flow(flavour: str) -> None:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return {"/b": problem(404, "unknown-store"), "/c": problem(403, "forbidden")}.get(
            request.url.path, httpx.Response(200, json={})
        )

    def flow(options: ClientOptions) -> Flow[Any]:
        try:
            yield from gather_calls(["/a", "/b", "/c"])(options)
        except UnknownStoreError as exc:
            return exc
        return None

    failure = run_flow(flavour, URL, flow, transport=httpx.MockTransport(handler))
    assert isinstance(failure, UnknownStoreError)
    assert sorted(asked) == ["/a", "/b", "/c"]


def test_a_streaming_flow_cannot_be_run_to_a_single_result() -> None:
    def emitting() -> Flow[None]:
        yield Emit([1])

    with StatestoreClient(URL) as client, pytest.raises(TypeError, match="streaming read"):
        client._run(emitting())


def test_nested_fan_outs_from_many_threads_share_the_client_threads_without_deadlock() -> None:
    def leaf(value: int) -> Flow[int]:
        yield Sleep(0.01)
        return value

    def branch(base: int) -> Flow[int]:
        found = yield Together((leaf(base), leaf(base + 1)))
        return sum(found)

    def root() -> Flow[int]:
        found = yield Together(tuple(branch(10 * i) for i in range(4)))
        return sum(found)

    client = StatestoreClient(ClientOptions(URL, max_connections=2))
    try:
        with ThreadPoolExecutor(4) as callers:
            results = list(callers.map(lambda _: client._run(root()), range(4)))
        assert results == [sum(10 * i + 10 * i + 1 for i in range(4))] * 4
        assert client._pool is not None
    finally:
        client.close()
    assert client._pool is None
