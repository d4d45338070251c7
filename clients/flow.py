"""Flows: the client's logic as generators that ask for I/O and get the answers back.

A flow is a generator. It yields a *step* (what it needs done), the driver does it and sends the
answer back in, and the flow's ``return`` value is the call's result. The steps:

- :class:`Attempt`: one HTTP exchange; answered with the ``httpx.Response``, or with the
  ``httpx.HTTPError`` it raised (as a value, so the flow decides what it means).
- :class:`Sleep`: wait before a retry; answered with ``None``.
- :class:`Together`: several flows run concurrently (threads in the sync driver,
  ``asyncio.gather`` in the async one); answered with their results in order. If any of them
  fails, every one is still waited for and the first error in order is raised inside the flow,
  at its ``yield``.
- :class:`Emit`: items for the caller of a streaming read (``scan``); answered with ``None``.

Nothing here does I/O: the drivers (:class:`clients.client.StatestoreClient`,
:class:`clients.aio.AsyncStatestoreClient`) are a few lines each, and every flow can be tested by
feeding it answers by hand. Retries are the flow :func:`sent`; batching and paging are built on it
in :mod:`clients.base` and :mod:`clients.paging`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import httpx

from clients import wire
from clients.exceptions import DeadlineExceededError, StatestoreClientError, TransportError
from clients.options import ClientOptions, log
from clients.retry import Deadline, RetryPolicy, is_retryable, next_delay
from clients.wire import Call

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    """Send ``call`` once with these query ``params`` and ``timeout`` (seconds)."""

    call: Call
    params: Mapping[str, str]
    timeout: float


@dataclasses.dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds`` before going on."""

    seconds: float


@dataclasses.dataclass(frozen=True, slots=True)
class Together:
    """Run ``flows`` concurrently; the answer is the list of their results, in order."""

    flows: tuple[Flow[Any], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Emit:
    """Hand ``items`` to the caller of a streaming read, in order (they may be produced lazily)."""

    items: Iterable[Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Thrown:
    """An answer that is an error: :class:`Walk` raises it inside the flow, where it yielded."""

    error: Exception


Step = Attempt | Sleep | Together | Emit
Flow = Generator[Step, Any, T]
"""A flow returning ``T``: it yields steps and is sent each step's answer."""


class Walk(Generic[T]):
    """Walks a flow for a driver: ``for step in walk: walk.reply(answer)``, then ``walk.result``.

    A step without a reply is answered ``None``; a :class:`Thrown` reply is raised inside the flow.
    An error the flow lets out ends the walk with that error.
    """

    __slots__ = ("_flow", "_reply", "result")

    def __init__(self, flow: Flow[T]) -> None:
        self._flow = flow
        self._reply: Any = None
        self.result: T

    def __iter__(self) -> Iterator[Step]:
        while True:
            reply, self._reply = self._reply, None
            try:
                step = self._flow.throw(reply.error) if isinstance(reply, Thrown) else self._flow.send(reply)
            except StopIteration as done:
                self.result = done.value
                return
            yield step

    def reply(self, answer: Any) -> None:
        """The answer to the step just taken."""
        self._reply = answer


def gathered(results: Sequence[Any]) -> list[Any] | Thrown:
    """The answer to :class:`Together` from its flows' results (an ``Exception`` result is a failure)."""
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, Exception):
            raise result  # cancellation and interrupts are not the flow's to handle
    errors = [result for result in results if isinstance(result, Exception)]
    return Thrown(errors[0]) if errors else list(results)


def collected(flow: Flow[None]) -> Flow[list[Any]]:
    """The items a streaming ``flow`` emits, as a list; its other steps pass through."""
    items: list[Any] = []
    walk = Walk(flow)
    for step in walk:
        if isinstance(step, Emit):
            items.extend(step.items)
            continue
        try:
            walk.reply((yield step))
        except Exception as error:
            walk.reply(Thrown(error))
    return items


def sent(call: Call, deadline: Deadline, options: ClientOptions) -> Flow[httpx.Response]:
    """``call`` sent until it succeeds: the successful response, or the error that ends the retries.

    Transient failures (transport errors, 503, 429) are retried per ``options.retry`` while
    ``deadline`` allows; a position wait is told to end in time for that (``timeout_ms``).
    """
    attempt = 0
    while True:
        attempt += 1
        remaining = deadline.remaining()
        params = wire.with_wait_budget(call.params, remaining)
        outcome = yield Attempt(call, params, max(0.001, min(options.timeout, remaining)))
        error = outcome_error(call, options.url_of(call.shard), outcome)
        if error is None:
            response: httpx.Response = outcome
            return response
        delay = next_delay(options.retry, attempt, error, deadline)
        if delay is None:
            raise on_shard(give_up(call, error, attempt, deadline, options.retry), call, options)
        log.info("retrying %s %s in %.3f s after: %s", call.method, call.path, delay, error)
        yield Sleep(delay)


def on_shard(error: BaseException, call: Call, options: ClientOptions) -> BaseException:
    """``error``, its message naming the shard and URL that answered when the call went to a shard."""
    if call.shard is not None and options.sharded:
        where = f"shard {call.shard} ({options.url_of(call.shard)})"
        error.args = (f"{where}: {error}", *error.args[1:])
    return error


def outcome_error(
    call: Call, base_url: str, outcome: httpx.Response | httpx.HTTPError
) -> StatestoreClientError | None:
    """The client error an attempt ended with, ``None`` for a success."""
    if isinstance(outcome, httpx.Response):
        return wire.response_error(outcome)
    error = transport_error(call, base_url, outcome)
    error.__cause__ = outcome
    return error


def transport_error(call: Call, base_url: str, exc: httpx.HTTPError) -> TransportError:
    """A client error for an httpx failure; its cause is the httpx error."""
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "failed"
    return TransportError(
        f"{call.method} {base_url}{call.path} {kind}: {exc or type(exc).__name__}; "
        "check that the service runs and the URL is right"
    )


def give_up(
    call: Call, error: StatestoreClientError, attempt: int, deadline: Deadline, policy: RetryPolicy
) -> BaseException:
    """What to raise when no retry follows: the error itself, or a deadline error caused by it."""
    attempts_left = policy.max_attempts is None or attempt < policy.max_attempts
    if is_retryable(error) and attempts_left:
        exhausted = DeadlineExceededError(
            f"{call.method} {call.path} did not succeed within its {deadline.seconds:g} s deadline "
            f"({attempt} attempt(s)); last error: {error}",
            last_error=error,
        )
        exhausted.__cause__ = error
        return exhausted
    return error
