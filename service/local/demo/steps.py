"""The demo's stages, each printing what it does: broker, seed, service, join, price update."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.local.demo import kafka
from service.local.demo.console import Console, seconds, table
from service.local.demo.dataset import (
    CUSTOMERS_TOPIC,
    PRODUCTS_TOPIC,
    PURCHASES_TOPIC,
    build_dataset,
)
from service.local.demo.errors import DemoError
from service.local.demo.join import (
    JoinSummary,
    lookup_product_purchases,
    print_summary,
    purchases_frame,
    run_join,
)
from service.local.demo.serving import demo_config, running_service, wait_until_ready

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PRICE_RISE = 1.10


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT while starting a child process, which inherits the blocked signal.

    Ctrl-C at a terminal signals the whole foreground process group: the broker must not die
    before the service that reads it has stopped, so only the demo sees the Ctrl-C and stops the
    broker last (with SIGTERM). A Ctrl-C pressed meanwhile is delivered when the block ends.
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def check_embedded_broker() -> None:
    """Fail before anything starts when the embedded broker is not installed."""
    from service.local.broker import LocalBrokerError, tansu_binary  # noqa: PLC0415

    try:
        tansu_binary()
    except LocalBrokerError as exc:
        raise DemoError(f"{exc}; or give --bootstrap-servers HOST:PORT of a running Kafka broker") from exc


@contextlib.contextmanager
def embedded_broker(console: Console, log_path: Path) -> Iterator[str]:
    """Start the embedded Tansu broker for the demo's lifetime; yields its bootstrap servers."""
    from service.local.broker import LocalBroker, LocalBrokerError  # noqa: PLC0415

    broker = LocalBroker(log_path=log_path)
    console.stage(f"starting the embedded broker on {broker.bootstrap_servers} ...")
    try:
        with _sigint_blocked():
            broker.start()
    except LocalBrokerError as exc:
        raise DemoError(f"{exc} (broker log: {log_path})") from exc
    try:
        yield broker.bootstrap_servers
    finally:
        console.detail("stopping the embedded broker")
        broker.stop()


def seed(console: Console, bootstrap_servers: str, purchases: int) -> None:
    """Create the topics (when missing) and load products, customers and purchases."""
    console.stage(f"creating topics and loading the invoice dataset into {bootstrap_servers} ...")
    created = kafka.create_topics(bootstrap_servers)
    console.detail(
        "topics: "
        + ", ".join(
            f"{topic} ({'created' if new else 'existing'}, "
            f"{'facts' if topic == PURCHASES_TOPIC else 'compacted'})"
            for topic, new in created.items()
        )
    )
    dataset = build_dataset(purchases)
    rows: list[list[Any]] = []
    for topic, records in kafka.dimension_records(dataset).items():
        started = time.monotonic()
        count, _ = kafka.produce(bootstrap_servers, topic, records)
        tombstones = sum(1 for _, value in records if value is None)
        rows.append([topic, count, tombstones, seconds(time.monotonic() - started)])
    started = time.monotonic()
    count, _ = kafka.produce(bootstrap_servers, PURCHASES_TOPIC, kafka.purchase_records(dataset))
    rows.append([PURCHASES_TOPIC, count, 0, seconds(time.monotonic() - started)])
    console.block(table(["topic", "records", "tombstones", "written in"], rows))
    console.detail(
        f"{len(dataset.discontinued)} products are discontinued (tombstoned); a few purchases name unknown "
        "products or customers, so the match rates below are realistic, not 100 %"
    )


@contextlib.contextmanager
def own_service(console: Console, bootstrap_servers: str, state_dir: Path | None) -> Iterator[str]:
    """Serve the demo stores from this process; the state lives in ``state_dir`` or a temp dir."""
    with contextlib.ExitStack() as stack:
        if state_dir is None:
            state_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="statestore-demo-")))
        else:
            state_dir.mkdir(parents=True, exist_ok=True)
        console.stage(f"starting the service (state in {state_dir}) and restoring the stores ...")
        url = stack.enter_context(running_service(bootstrap_servers, state_dir))
        console.detail(f"service listening on {url} (no auth: reachable from this machine only)")
        stack.callback(console.detail, "stopping the service")
        yield url


@contextlib.contextmanager
def own_shards(
    console: Console, bootstrap_servers: str, state_dir: Path | None, shards: int
) -> Iterator[str]:
    """Serve the demo stores as ``shards`` shards, one ``statestore serve`` process each; yields the
    URL template naming them, once every shard is ready."""
    from service.local.shards import LocalShards, LocalShardsError  # noqa: PLC0415

    with contextlib.ExitStack() as stack:
        if state_dir is None:
            state_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="statestore-demo-")))
        else:
            state_dir.mkdir(parents=True, exist_ok=True)
        console.stage(
            f"starting {shards} shard processes (state in {state_dir}/shard-N) and restoring their"
            " partitions ..."
        )
        group = LocalShards(
            demo_config(bootstrap_servers), shards, state_dir, state_dir / "logs", log_level="WARNING"
        )
        try:
            with _sigint_blocked():
                group.start()
        except LocalShardsError as exc:
            group.stop()
            raise DemoError(str(exc)) from exc
        stack.callback(group.stop)
        stack.callback(console.detail, "stopping the shard processes")
        for shard in range(shards):
            console.detail(f"shard {shard}: {group.url_of(shard)} (log {group.log_path(shard)})")
            wait_until_ready(console, group.url_of(shard))
        console.detail(f"clients reach every shard through the URL template {group.url}")
        show_shards(console, group.url)
        yield group.url


def show_shards(console: Console, url: str) -> None:
    """Each store's partitions per shard, and the table's position: the union of the shards'."""
    from clients import StatestoreClient  # noqa: PLC0415

    with StatestoreClient(url) as client:
        for name in (PRODUCTS_TOPIC, CUSTOMERS_TOPIC):
            info = client.store(name)
            parts = "; ".join(
                f"shard {shard['sharding']['shard']}: partitions {shard['sharding']['partitions']}"
                f" at {shard['position'] or '(empty)'}"
                for shard in info.raw.get("shards", [info.raw])
            )
            console.detail(f"{name}: position {info.position or '(empty)'} ({parts})")


def await_service(console: Console, url: str, *, own: bool) -> None:
    if not own:
        console.stage(f"waiting until the service at {url} is ready ...")
    stores = wait_until_ready(console, url)
    for name in (PRODUCTS_TOPIC, CUSTOMERS_TOPIC):
        if name not in stores:
            raise DemoError(
                f"the service at {url} has no store {name!r}: configure stores {PRODUCTS_TOPIC!r} and "
                f"{CUSTOMERS_TOPIC!r} (JSON values) reading the demo topics"
            )
        console.detail(f"{name}: position {stores[name].get('position') or '(empty)'}")
    if not own:
        check_demo_data(url)


def check_demo_data(url: str, sample: int = 20) -> None:
    """Fail when the service's products or customers hold none of the demo's rows.

    A join against tables without the demo's data would only print match rates of 0 %.
    """
    from clients import StatestoreClient  # noqa: PLC0415

    dataset = build_dataset(1)  # the tables do not depend on the number of purchases
    samples = {
        PRODUCTS_TOPIC: sorted(dataset.live_products())[:sample],
        CUSTOMERS_TOPIC: sorted(dataset.customers)[:sample],
    }
    with StatestoreClient(url) as client:
        empty = [
            store for store, keys in samples.items() if all(v is None for v in client.get_many(store, keys))
        ]
    if empty:
        looked_up = ", ".join(f"{samples[store][0]} … in {store}" for store in empty)
        raise DemoError(
            f"the service at {url} does not hold the demo's data (looked up {looked_up}, found none): "
            "load it into the Kafka cluster that service reads with `statestore demo --step seed "
            "--bootstrap-servers HOST:PORT`, then run the join again"
        )


def load_purchases(console: Console, bootstrap_servers: str | None, purchases: int) -> list[dict[str, Any]]:
    started = time.monotonic()
    if bootstrap_servers is None:
        generated = list(build_dataset(purchases).purchases())
        console.detail(f"no broker given: generated {len(generated):,} purchases (the seed step's data)")
        return generated
    read = kafka.read_purchases(bootstrap_servers)
    if not read:
        raise DemoError(
            f"topic {PURCHASES_TOPIC!r} on {bootstrap_servers} is empty: load the demo data first with "
            f"`statestore demo --step seed --bootstrap-servers {bootstrap_servers}`"
        )
    console.detail(
        f"read {len(read):,} purchases from topic {PURCHASES_TOPIC!r} "
        f"in {seconds(time.monotonic() - started)}"
    )
    return read


@dataclasses.dataclass
class Joined:
    """What later stages need from the join: the purchases DataFrame and the run's summary."""

    purchases: Any  # pyspark DataFrame (pyspark is imported lazily)
    summary: JoinSummary


def join(console: Console, spark: Any, url: str, bootstrap_servers: str | None, purchases: int) -> Joined:
    """Enrich purchases into invoices with two lookup joins, print a sample and a summary."""
    console.stage("enriching purchases into invoices: Spark lookup join (local[2]) ...")
    rows = load_purchases(console, bootstrap_servers, purchases)
    started = time.monotonic()
    session: SparkSession = spark.session()
    waited = time.monotonic() - started
    if waited > 0.5:
        console.detail(f"Spark started (waited {seconds(waited)} for it)")
    frame = purchases_frame(session, rows).cache()
    frame.count()  # materialize once, so the join's timing is the lookups' alone
    summary = run_join(frame, url)
    print_summary(console, summary)
    return Joined(frame, summary)


def update_price(console: Console, url: str, bootstrap_servers: str, joined: Joined) -> None:
    """Raise one product's price in the topic and show that the next lookup sees it."""
    from clients import StatestoreClient  # noqa: PLC0415

    console.stage("updating a product's price in the topic and looking it up again ...")
    product_id = next(
        (row["product_id"] for row in joined.summary.sample if row.get("product_name") is not None), None
    )
    if product_id is None:
        raise DemoError("no purchase of the sample has a known product; cannot show a price update")
    with StatestoreClient(url) as client:
        product = client.get(PRODUCTS_TOPIC, product_id)
        if not isinstance(product, dict):
            raise DemoError(f"product {product_id} is no longer in the service; cannot update its price")
        old_price = float(product["unit_price"])
        new_price = round(old_price * PRICE_RISE, 2)
        partition, offset = kafka.update_product(
            bootstrap_servers, product_id, {**product, "unit_price": new_price}
        )
        min_position = f"{partition}:{offset + 1}"
        console.detail(
            f"{product_id} {product['name']!r}: unit price {old_price:,.2f} -> {new_price:,.2f} "
            f"(written to {PRODUCTS_TOPIC} at partition {partition}, offset {offset})"
        )
        started = time.monotonic()
        served = client.get(PRODUCTS_TOPIC, product_id, min_position=min_position)
        console.detail(
            f"the service reached position {min_position} in {seconds(time.monotonic() - started)}; "
            f"it now serves unit price {float(served['unit_price']):,.2f}"
        )
    rows = lookup_product_purchases(joined.purchases, url, product_id, min_position)
    console.detail(f"next lookup join (min_position={min_position}), purchases of {product_id}:")
    console.block(
        table(
            ["purchase", "product", "qty", "unit price", "line total"],
            [
                [r["purchase_id"], r["product_id"], r["quantity"], r["product_unit_price"], r["line_total"]]
                for r in rows
            ],
        )
    )
    seen = {r["product_unit_price"] for r in rows}
    if seen != {new_price}:
        raise DemoError(
            f"the lookup after the update saw unit prices {sorted(seen)}, expected {new_price:,.2f}"
        )
    console.detail(
        f"price update seen: the next lookup sees unit price {new_price:,.2f} (was {old_price:,.2f})"
    )
