"""The client's routing over shards, against shards simulated in memory (pure client logic).

:class:`FakeShards` answers like the HTTP API from a dict per shard, on hosts ``shard-N.test``: the
sharding in ``StoreInfo``, 421 ``wrong-shard`` for a key of another shard, positions naming only the
shard's partitions. The real shard processes are exercised in tests/service/test_sharded.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest

from clients import AsyncStatestoreClient, StatestoreClient
from clients.exceptions import ShardingError, TransportError, WrongShardError
from clients.partitioners import PARTITIONERS
from clients.retry import RetryPolicy
from wire.position import Position

TEMPLATE = "http://shard-{shard}.test"
FAST = RetryPolicy(initial_backoff=0.001, max_backoff=0.005)


class FakeShards:
    """``shards`` shards of store ``s`` (JSON values) holding ``rows``; ``down`` shards refuse connections."""

    def __init__(self, rows: dict[str, Any], shards: int = 3, topic_partitions: int = 6) -> None:
        self.rows = {key.encode(): json.dumps(value).encode() for key, value in rows.items()}
        self.shards = shards
        self.topic_partitions = topic_partitions
        self.down: set[int] = set()
        self.requests: list[tuple[int, str, dict[str, str]]] = []

    def partition(self, key: bytes) -> int:
        return PARTITIONERS["murmur2"](key, self.topic_partitions)

    def shard_of(self, key: bytes) -> int:
        return self.partition(key) % self.shards

    def owned(self, shard: int) -> dict[bytes, bytes]:
        return {k: v for k, v in self.rows.items() if self.shard_of(k) == shard}

    def position(self, shard: int) -> Position:
        """Every partition of the shard, at 10 times its number plus 1."""
        return Position({p: 10 * p + 1 for p in range(self.topic_partitions) if p % self.shards == shard})

    def info(self, shard: int) -> dict[str, Any]:
        return {
            "name": "s",
            "topic": "s",
            "value_format": "json",
            "state": "READY",
            "position": str(self.position(shard)),
            "total_lag": shard,
            "sharding": {
                "shards": self.shards,
                "shard": shard,
                "partitions": [p for p in range(self.topic_partitions) if p % self.shards == shard],
                "partitioner": "murmur2",
                "topic_partitions": self.topic_partitions,
            },
        }

    def wrong_shard(self, shard: int, key: bytes) -> httpx.Response:
        body = {
            "type": "urn:statestore:problem:wrong-shard",
            "title": "Wrong shard",
            "status": 421,
            "detail": f"shard {shard} does not hold this key; shard {self.shard_of(key)} does",
            "shard": self.shard_of(key),
        }
        return httpx.Response(421, json=body)

    def handler(self, request: httpx.Request) -> httpx.Response:
        shard = int(request.url.host.split(".")[0].removeprefix("shard-"))
        path, params = request.url.path, dict(request.url.params)
        self.requests.append((shard, path, params))
        if shard in self.down or shard >= self.shards:
            raise httpx.ConnectError("connection refused", request=request)
        headers = {"Statestore-Position": str(self.position(shard))}
        if path == "/v1/stores":
            return httpx.Response(200, json={"stores": [self.info(shard)]})
        if path == "/v1/stores/s":
            return httpx.Response(200, json=self.info(shard), headers=headers)
        if path.startswith("/v1/stores/s/keys/"):
            key = path.removeprefix("/v1/stores/s/keys/").encode()
            if self.shard_of(key) != shard:
                return self.wrong_shard(shard, key)
            if key not in self.rows:
                return httpx.Response(404, json={"type": "urn:statestore:problem:key-not-found"})
            return httpx.Response(
                200, content=self.rows[key], headers={**headers, "Content-Type": "application/json"}
            )
        if path == "/v1/stores/s/keys:batchGet":
            keys = pa.ipc.open_stream(request.content).read_all().column("key").to_pylist()
            misplaced = [k for k in keys if self.shard_of(k) != shard]
            if misplaced:
                return self.wrong_shard(shard, misplaced[0])
            table = pa.table({"key": pa.array(keys, pa.binary()), "value": [self.rows.get(k) for k in keys]})
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            return httpx.Response(200, content=sink.getvalue().to_pybytes(), headers=headers)
        if path == "/v1/stores/s/scan":
            prefix, after = params.get("prefix", "").encode(), params.get("after", "").encode()
            limit = int(params["limit"])
            keys = sorted(k for k in self.owned(shard) if k.startswith(prefix) and k > after)
            page = keys[:limit]
            body = {
                "items": [{"key": k.decode(), "value": json.loads(self.rows[k])} for k in page],
                "next_after": page[-1].decode() if len(keys) > limit else None,
            }
            return httpx.Response(200, json=body, headers=headers)
        if path.startswith("/v1/stores/s/indexes/by_first/"):
            value = path.rsplit("/", 1)[1]
            after = base64.urlsafe_b64decode(params["after"]) if "after" in params else b""
            keys = sorted(k for k in self.owned(shard) if k[:1].decode() == value and k > after)
            page = keys[: int(params["limit"])]
            body = {
                "items": [
                    {"key": base64.b64encode(k).decode(), "value": json.loads(self.rows[k])} for k in page
                ],
                "next_after": base64.b64encode(page[-1]).decode() if len(keys) > len(page) else None,
            }
            return httpx.Response(200, json=body, headers=headers)
        raise AssertionError(f"unexpected request {request.method} {request.url}")

    def asked(self, path_start: str) -> list[int]:
        """The shards asked for paths starting with ``path_start``, in order."""
        return [shard for shard, path, _ in self.requests if path.startswith(path_start)]


ROWS = {f"user-{i:03d}": {"n": i} for i in range(120)}


@pytest.fixture
def shards() -> FakeShards:
    return FakeShards(ROWS)


@pytest.fixture
def client(shards: FakeShards) -> Iterator[StatestoreClient]:
    with StatestoreClient(TEMPLATE, transport=httpx.MockTransport(shards.handler), retry=FAST) as sharded:
        yield sharded


def test_every_key_goes_to_its_shard_after_one_read_of_the_sharding(
    shards: FakeShards, client: StatestoreClient
) -> None:
    keys = ["user-000", "user-001", "user-042", "absent"]
    assert [client.get("s", key) for key in keys] == [{"n": 0}, {"n": 1}, {"n": 42}, None]
    assert shards.asked("/v1/stores/s") == [0] + [shards.shard_of(k.encode()) for k in keys]
    assert len({shards.shard_of(k.encode()) for k in keys}) > 1


def test_batches_are_split_per_shard_sent_together_and_answered_in_request_order(
    shards: FakeShards,
) -> None:
    keys = [*reversed(ROWS), "absent", "user-007", "user-007"]
    with StatestoreClient(
        TEMPLATE, transport=httpx.MockTransport(shards.handler), batch_size=16, retry=FAST
    ) as client:
        found = client.get_many("s", keys)
    assert found == [ROWS.get(key) for key in keys]
    batches = [(shard, params) for shard, path, params in shards.requests if path.endswith(":batchGet")]
    assert {shard for shard, _ in batches} == {0, 1, 2}
    per_shard = {s: len(shards.owned(s)) + (s == shards.shard_of(b"absent")) for s in range(3)}
    assert sum(1 for shard, _ in batches) == sum(-(-count // 16) for count in per_shard.values())


def test_positions_merge_and_each_shard_gets_its_part_of_a_pinned_position(
    shards: FakeShards, client: StatestoreClient
) -> None:
    table = client.position("s")
    assert table == Position({p: 10 * p + 1 for p in range(6)})
    info = client.store("s")
    assert info.position == table
    assert info.total_lag == 0 + 1 + 2
    assert [part["sharding"]["shard"] for part in info.raw["shards"]] == [0, 1, 2]
    shards.requests.clear()
    view = client.consistent("s")
    assert view.get_many(["user-001", "user-002", "user-003", "user-004"]) == [{"n": i} for i in range(1, 5)]
    for shard, path, params in shards.requests:
        if path.endswith(":batchGet"):
            assert Position.parse(params["as_of"]) == shards.position(shard)


def test_a_scan_across_shards_is_complete_and_byte_ordered(client: StatestoreClient) -> None:
    rows = list(client.scan("s", "user-0", page_size=7))
    assert [key for key, _ in rows] == sorted(key for key in ROWS if key.startswith("user-0"))
    assert rows == [(key, ROWS[key]) for key, _ in rows]
    assert list(client.scan("s", "user-11", page_size=2)) == [
        (key, ROWS[key]) for key in sorted(ROWS) if key.startswith("user-11")
    ]
    assert list(client.scan("s", "nothing")) == []


def test_a_scan_asks_a_shard_for_its_next_page_only_when_its_items_run_out(
    shards: FakeShards, client: StatestoreClient
) -> None:
    rows = client.scan("s", "user-", page_size=5)
    first = [next(rows) for _ in range(3)]
    assert [key for key, _ in first] == ["user-000", "user-001", "user-002"]
    # One page per shard so far: nothing is read ahead of what the merge needs.
    assert sorted(shards.asked("/v1/stores/s/scan")) == [0, 1, 2]
    assert len(list(rows)) == len(ROWS) - 3


def test_index_lookups_merge_every_shards_rows_in_row_key_order(client: StatestoreClient) -> None:
    found = list(client.index_lookup("s", "by_first", "u", page_size=9))
    assert found == [(key, ROWS[key]) for key in sorted(ROWS)]


def test_one_shard_down_fails_its_keys_naming_the_shard_while_the_others_answer(
    shards: FakeShards, client: StatestoreClient
) -> None:
    shards.down.add(1)
    on_one = next(key for key in ROWS if shards.shard_of(key.encode()) == 1)
    elsewhere = [key for key in ROWS if shards.shard_of(key.encode()) != 1][:5]
    assert [client.get("s", key, deadline=0.2) for key in elsewhere] == [ROWS[key] for key in elsewhere]
    with pytest.raises(Exception, match=r"shard 1 \(http://shard-1\.test\)") as failed:
        client.get_many("s", [*elsewhere, on_one], deadline=0.2)
    assert isinstance(failed.value, TransportError) or isinstance(failed.value.__cause__, TransportError)
    with pytest.raises(Exception, match=r"shard 1 \(http://shard-1\.test\)"):
        client.get("s", on_one, deadline=0.2)


def test_the_sharding_is_read_from_another_shard_when_the_first_is_down(shards: FakeShards) -> None:
    shards.down.add(0)
    key = next(key for key in ROWS if shards.shard_of(key.encode()) == 2)
    with StatestoreClient(TEMPLATE, transport=httpx.MockTransport(shards.handler), retry=FAST) as client:
        assert client.get("s", key) == ROWS[key]
    assert [shard for shard, path, _ in shards.requests] == [0, 1, 2]


def test_a_wrong_shard_answer_makes_the_client_read_the_sharding_again(
    shards: FakeShards, client: StatestoreClient
) -> None:
    assert client.get("s", "user-000") == {"n": 0}
    # The topic grows to 8 partitions: keys move to other partitions, some to other shards (growing
    # to a multiple of 3 would keep every key on its shard: h % 9 % 3 == h % 6 % 3).
    shards.topic_partitions = 8
    moved = [key for key in ROWS if FakeShards(ROWS).shard_of(key.encode()) != shards.shard_of(key.encode())]
    assert moved
    shards.requests.clear()
    assert client.get("s", moved[0]) == ROWS[moved[0]]
    key_path = "/v1/stores/s/keys/" + moved[0]
    assert [path for _, path, _ in shards.requests] == [key_path, "/v1/stores/s", key_path]
    assert client.get_many("s", list(ROWS)) == list(ROWS.values())


def test_a_plain_url_to_one_shard_of_many_says_to_use_a_template(shards: FakeShards) -> None:
    with StatestoreClient(
        "http://shard-0.test", transport=httpx.MockTransport(shards.handler), retry=FAST
    ) as client:
        with pytest.raises(ShardingError, match=r"URL template holding \{shard\}"):
            client.get_arrow("s", pa.array([k.encode() for k in ROWS], pa.binary()))
        with pytest.raises(ShardingError, match="3 shards"):
            client.get("s", "user-000")
    # Without a template the client sent the batch first: it asks for the sharding only on a 421.
    assert [path for _, path, _ in shards.requests] == ["/v1/stores/s/keys:batchGet", "/v1/stores/s"]


def test_a_wrong_shard_answer_that_persists_is_raised(shards: FakeShards) -> None:
    def misplaced(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith(":batchGet"):
            return shards.wrong_shard(0, b"user-000")
        return shards.handler(request)

    transport = httpx.MockTransport(misplaced)
    with (
        StatestoreClient(TEMPLATE, transport=transport, retry=FAST) as client,
        pytest.raises(WrongShardError, match="does not hold this key"),
    ):
        client.get_many("s", ["user-000", "user-001"])


def test_the_async_client_routes_the_same_way(shards: FakeShards) -> None:
    async def run() -> tuple[list[Any], list[Any]]:
        async with AsyncStatestoreClient(
            TEMPLATE, transport=httpx.MockTransport(shards.handler), batch_size=10, retry=FAST
        ) as client:
            found = await client.get_many("s", list(ROWS))
            rows = [row async for row in client.scan("s", "user-1", page_size=4)]
            return found, rows

    found, rows = asyncio.run(run())
    assert found == list(ROWS.values())
    assert rows == [(key, ROWS[key]) for key in sorted(ROWS) if key.startswith("user-1")]


def test_an_answer_naming_an_unknown_partition_makes_the_client_read_the_sharding_again(
    shards: FakeShards, client: StatestoreClient
) -> None:
    assert client.get("s", "user-000") == {"n": 0}
    # The topic grew to 9 partitions (keys stay on their shards: 9 is a multiple of 3); answers now
    # name partitions 6 to 8, which the client's sharding does not know.
    shards.topic_partitions = 9
    assert client.get("s", "user-001") == {"n": 1}
    shards.requests.clear()
    assert client.get("s", "user-002") == {"n": 2}
    assert [path for _, path, _ in shards.requests] == ["/v1/stores/s", "/v1/stores/s/keys/user-002"]
    assert client._shardings["s"].topic_partitions == 9


def test_the_store_list_merges_every_shard(shards: FakeShards, client: StatestoreClient) -> None:
    (info,) = client.stores()
    assert info.position == Position({p: 10 * p + 1 for p in range(6)})
    assert sorted(shard for shard, path, _ in shards.requests if path == "/v1/stores") == [0, 1, 2]
