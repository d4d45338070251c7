"""The task function of a lookup join (what ``mapInArrow`` runs), on Arrow batches without Spark."""

from __future__ import annotations

import threading

import pyarrow as pa

from clients.lookup import LookupSpec
from clients.options import ClientOptions
from clients.spark.tasks import JoinStep, join_task
from store import InMemoryStore
from tests.clients.conftest import ServeStores

PRODUCT = pa.struct([("name", pa.string())])


def test_a_task_joins_its_batches_and_ends_its_request_threads(serve_stores: ServeStores) -> None:
    store = InMemoryStore("products")
    store.apply([(0, i, f"p{i}".encode(), b'{"name": "n%d"}' % i) for i in range(10)])
    url = serve_stores({"products": (store, "json")})
    spec = LookupSpec(ClientOptions(url, batch_size=2), "products", "0:10", "json", PRODUCT)
    keys = [f"p{i % 12}" for i in range(30)]
    batches = pa.table({"id": keys}).to_batches(max_chunksize=7)
    output = list(join_task([JoinStep(spec, 0, "left", None)], 1, ["id", "name"])(iter(batches)))
    joined = pa.Table.from_batches(output)
    assert joined.column("id").to_pylist() == keys
    assert joined.column("name").to_pylist() == [f"n{i % 12}" if i % 12 < 10 else None for i in range(30)]
    # 12 distinct keys, 2 a request: the threads that sent them at once ended with the task.
    assert [t.name for t in threading.enumerate() if t.name.startswith("statestore-lookup")] == []
