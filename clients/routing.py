"""Routing reads to shards, written once for both clients: which shard a call goes to, and how the
client learns and refreshes each store's sharding.

:class:`ShardRouting` is the part of :class:`clients.base.BaseClient` that knows about shards: the
sharding of each store, read from any shard and cached (read again after a 421 ``wrong-shard``, or
when an answer names a partition the cached sharding does not know), the flows that send calls
within a deadline, and a store's status across its shards (``StoreInfo.merged``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

import httpx

from clients import flow, wire
from clients.exceptions import DeadlineExceededError, ShardingError, StatestoreClientError, WrongShardError
from clients.flow import Flow, Sleep, Together
from clients.options import ClientOptions
from clients.paging import Send
from clients.retry import NO_RETRY, Deadline, is_retryable
from clients.sharding import Sharding
from clients.wire import Call, StoreInfo, ValueFormat
from wire.position import Position, PositionLike

T = TypeVar("T")

MAX_PROBED_SHARDS = 16
"""Shards asked in turn for a store's sharding before the client knows how many there are."""


class ShardRouting:
    """Sends calls, to one service or to the shards of a sharded deployment, and knows the shardings."""

    options: ClientOptions

    def __init__(self) -> None:
        self._formats: dict[str, ValueFormat] = {}
        self._shardings: dict[str, Sharding] = {}
        self._shard_count: int | None = None

    def _deadline(self, seconds: float | None) -> Deadline:
        return Deadline(seconds or self.options.deadline)

    def _sent(self, call: Call, deadline: Deadline) -> Flow[httpx.Response]:
        return flow.sent(call, deadline, self.options)

    def _sender(self, deadline: Deadline | float | None, shard: int | None = None) -> Send:
        """Sends calls to ``shard`` within ``deadline``: one shared ``Deadline``, or these seconds each."""
        if isinstance(deadline, Deadline):
            return lambda call: self._sent(call.to(shard), deadline)
        return lambda call: self._sent(call.to(shard), self._deadline(deadline))

    def _learn(self, info: StoreInfo) -> StoreInfo:
        """Remember what a store's status says about its value format and sharding."""
        self._formats[info.name] = info.value_format
        self._shardings[info.name] = info.sharding
        if info.sharding.routable:
            self._shard_count = info.sharding.shards
        return info

    def _target(self, shard: int) -> int | None:
        """Where a call for ``shard`` goes: that shard, or the URL as given when it names one service."""
        return shard if self.options.sharded else None

    def _any_shard_flow(self, call: Call, deadline: Deadline) -> Flow[tuple[int, httpx.Response]]:
        """``call`` answered by any shard, and which one answered.

        Shards are asked in turn, once each (all the known shards, else up to ``MAX_PROBED_SHARDS``),
        so one shard down does not stop the client; rounds repeat with backoff within ``deadline``.
        """
        if not self.options.sharded:
            response = yield from self._sent(call, deadline)
            return 0, response
        once = dataclasses.replace(self.options, retry=NO_RETRY)
        round_number = 0
        while True:
            failures: list[StatestoreClientError] = []
            for shard in range(self._shard_count or MAX_PROBED_SHARDS):
                try:
                    response = yield from flow.sent(call.to(shard), deadline, once)
                except StatestoreClientError as error:
                    if not is_retryable(error):
                        raise
                    failures.append(error)
                    continue
                return shard, response
            delay = self.options.retry.delay(round_number)
            round_number += 1
            if delay >= deadline.remaining():
                raise DeadlineExceededError(
                    f"no shard of {self.options.url} answered {call.method} {call.path} within"
                    f" {deadline.seconds:g} s; first failure: {failures[0]}",
                    last_error=failures[-1],
                ) from failures[0]
            yield Sleep(delay)

    def _store_info_flow(self, store: str, deadline: Deadline, shard: int | None) -> Flow[StoreInfo]:
        response = yield from self._sent(Call("GET", wire.store_path(store), shard=shard), deadline)
        return self._learn(StoreInfo.from_json(wire.json_body(response)))

    def _any_store_info_flow(self, store: str, deadline: Deadline) -> Flow[tuple[int, StoreInfo]]:
        """The status of ``store`` as any shard reports it, and which shard answered."""
        shard, response = yield from self._any_shard_flow(Call("GET", wire.store_path(store)), deadline)
        return shard, self._learn(StoreInfo.from_json(wire.json_body(response)))

    def _routing_flow(self, store: str, deadline: Deadline, refresh: bool = False) -> Flow[Sharding]:
        """The sharding to route ``store``'s keys by: cached, read from any shard when unknown or stale.

        A URL that names one service routes to it without asking, until a 421 says otherwise.
        """
        sharding = self._shardings.get(store)
        if refresh or (sharding is None and self.options.sharded):
            _, info = yield from self._any_store_info_flow(store, deadline)
            # A shard that has not read the topic's partition count yet cannot say where keys are.
            while self.options.sharded and not info.sharding.routable and deadline.remaining() > 0.2:
                yield Sleep(0.2)
                _, info = yield from self._any_store_info_flow(store, deadline)
            sharding = info.sharding
        if sharding is None:
            return Sharding()
        if sharding.shards > 1 and not self.options.sharded:
            raise ShardingError(
                f'store "{store}" is spread over {sharding.shards} shards, but {self.options.url} names'
                " one service: give the client a URL template holding {shard}, e.g."
                " http://statestore-{shard}.statestore:8080"
            )
        if not sharding.routable:
            raise ShardingError(
                f'store "{store}" does not know its topic\'s partition count yet, so keys cannot be'
                " routed to its shards; retry once it is READY"
            )
        return sharding

    def _routed(self, store: str, deadline: Deadline, read: Callable[[Sharding], Flow[T]]) -> Flow[T]:
        """``read`` with the store's sharding, and once more with a fresh one after a 421 wrong-shard."""
        sharding = yield from self._routing_flow(store, deadline)
        try:
            return (yield from read(sharding))
        except WrongShardError:
            pass
        sharding = yield from self._routing_flow(store, deadline, refresh=True)
        return (yield from read(sharding))

    def _notice_growth(self, store: str, sharding: Sharding, response: httpx.Response) -> None:
        """Forget the sharding when an answer names a partition it does not know (the topic grew)."""
        if sharding.shards == 1 or sharding.topic_partitions is None:
            return
        position = wire.position_of(response)
        if position and not all(sharding.knows_partition(p) for p in position):
            self._shardings.pop(store, None)

    # -- a store's status, across its shards ------------------------------------------------------

    def _stores_flow(self, deadline: float | None) -> Flow[list[StoreInfo]]:
        budget = self._deadline(deadline)
        listing = Call("GET", "/v1/stores")
        answered, response = yield from self._any_shard_flow(listing, budget)
        first = [
            self._learn(StoreInfo.from_json(item)) for item in wire.json_body(response).get("stores", [])
        ]
        shards = max((info.sharding.shards for info in first), default=1)
        if shards == 1 or not self.options.sharded:
            return first
        others = [shard for shard in range(shards) if shard != answered]
        responses = yield Together(tuple(self._sent(listing.to(shard), budget) for shard in others))
        by_name: dict[str, list[StoreInfo]] = {info.name: [info] for info in first}
        for other in responses:
            for item in wire.json_body(other).get("stores", []):
                info = StoreInfo.from_json(item)
                by_name.setdefault(info.name, []).append(info)
        return [StoreInfo.merged(infos) for infos in by_name.values()]

    def _store_flow(self, store: str, deadline: float | None) -> Flow[StoreInfo]:
        """The store's status; across every shard of a sharded store (see ``StoreInfo.merged``)."""
        budget = self._deadline(deadline)
        answered, info = yield from self._any_store_info_flow(store, budget)
        shards = info.sharding.shards
        if shards == 1 or not self.options.sharded:
            return info
        others = [shard for shard in range(shards) if shard != answered]
        infos = yield Together(tuple(self._store_info_flow(store, budget, shard) for shard in others))
        infos.insert(answered, info)
        return StoreInfo.merged(infos)

    def _position_flow(
        self, store: str, position: PositionLike | None, deadline: float | None = None
    ) -> Flow[Position]:
        """``position`` if given, else the store's position now (the table's, across its shards)."""
        if position is not None:
            return Position.of(position)
        info = yield from self._store_flow(store, deadline)
        return info.position

    def _value_format_flow(self, store: str) -> Flow[ValueFormat]:
        if store not in self._formats:
            yield from self._any_store_info_flow(store, self._deadline(None))
        return self._formats[store]
