"""``statestore demo``: the whole product end to end, the seed step on the real broker, and its failures."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from service.cli import build_parser
from service.local.broker import LocalBroker
from service.local.demo import run, steps
from service.local.demo.console import Console, table
from service.local.demo.dataset import build_dataset
from service.local.demo.serving import running_service
from tests.support.kafka import Record, create_topic, latest_per_key

REPO = Path(__file__).resolve().parents[3]
DEMO_PURCHASES = 20_000


def demo_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "service.cli", "demo", *args]


def run_demo(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        demo_command(*args),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def read_topic(bootstrap_servers: str, topic: str) -> dict[int, list[Record]]:
    """Every record of ``topic`` per partition, in offset order, read up to the end (partition EOF)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "test-demo",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        partitions = sorted(consumer.list_topics(timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: dict[int, list[Record]] = {p: [] for p in partitions}
        open_partitions = set(partitions)
        deadline = time.monotonic() + 60
        while open_partitions and time.monotonic() < deadline:
            for message in consumer.consume(10_000, timeout=0.5):
                error = message.error()
                if error is None:
                    records[message.partition()].append((message.key(), message.value()))
                elif error.code() == KafkaError._PARTITION_EOF:
                    open_partitions.discard(message.partition())
        assert not open_partitions, f"topic {topic} was not read to its end"
        return records
    finally:
        consumer.close()


def expected_match_counts(purchases: int) -> tuple[int, int]:
    dataset = build_dataset(purchases)
    live_products, customers = dataset.live_products(), set(dataset.customers)
    rows = list(dataset.purchases())
    return (
        sum(1 for p in rows if p["product_id"] in live_products),
        sum(1 for p in rows if p["customer_id"] in customers),
    )


INVOICES_SEEN: dict[int, str] = {}
"""The invoices (sample table, match rates, revenue, positions) each whole demo printed, by shards."""


@pytest.mark.slow
@pytest.mark.parametrize("shards", [1, 3])
def test_the_whole_demo_enriches_purchases_and_sees_a_price_update(tmp_path: Path, shards: int) -> None:
    state_dir = tmp_path / "state"
    done = run_demo(
        "--purchases", str(DEMO_PURCHASES), "--state-dir", str(state_dir), "--shards", str(shards)
    )
    output = done.stdout
    assert done.returncode == 0, f"stdout:\n{output}\nstderr:\n{done.stderr}"
    assert "Traceback" not in done.stderr

    for stage in range(1, 7):
        assert f"[{stage}/6] " in output
    assert f"rows enriched: {DEMO_PURCHASES:,} in " in output
    products_matched, customers_matched = expected_match_counts(DEMO_PURCHASES)
    assert 0 < products_matched < DEMO_PURCHASES
    assert 0 < customers_matched < DEMO_PURCHASES
    assert (
        f"match rate products: {100 * products_matched / DEMO_PURCHASES:.2f} % ({products_matched:,} matched"
        in output
    )
    customers_rate = 100 * customers_matched / DEMO_PURCHASES
    assert f"match rate customers: {customers_rate:.2f} % ({customers_matched:,} matched" in output
    assert re.search(r"pinned position products: \d+:\d+", output)

    update = re.search(
        r"unit price ([\d,.]+) -> ([\d,.]+) \(written to products at partition (\d+), offset (\d+)\)", output
    )
    assert update, output
    old_price, new_price = update.group(1), update.group(2)
    assert old_price != new_price
    assert f"it now serves unit price {new_price}" in output
    assert f"price update seen: the next lookup sees unit price {new_price} (was {old_price})" in output
    # The lookup after the update shows the new price in its rows.
    after = output.split("next lookup join", 1)[1]
    assert re.search(rf"\s{re.escape(new_price)}\s", after)

    assert "stopping Spark" in output
    assert "stopping the embedded broker" in output
    invoices = output.split("sample of the invoices:", 1)[1].split("[5/6]", 1)[0]
    INVOICES_SEEN[shards] = invoices
    if shards == 1:
        assert "stopping the service" in output
        # The service kept its stores in the given state dir.
        assert (state_dir / "products").is_dir()
        assert (state_dir / "customers").is_dir()
        return
    # Every shard holds its partition; the table's position is theirs together, and the invoices
    # are the unsharded run's, row for row.
    assert "stopping the shard processes" in output
    assert (state_dir / "shard-2" / "products").is_dir()
    for store in ("products", "customers"):
        line = re.search(rf"{store}: position (\S+) \((shard 0.*)\)", output)
        assert line, output
        parts = re.findall(r"shard (\d): partitions \[(\d)\] at (\d+:\d+)", line.group(2))
        assert [(shard, partition) for shard, partition, _ in parts] == [("0", "0"), ("1", "1"), ("2", "2")]
        assert line.group(1) == ",".join(at for _, _, at in parts)
        assert f"pinned position {store}: {line.group(1)}" in output
    if 1 in INVOICES_SEEN:
        assert invoices.split("rows enriched")[0] == INVOICES_SEEN[1].split("rows enriched")[0]
        # Positions may differ between the two runs' brokers (a retried batch is appended twice).
        assert re.findall(r"match rate .*|revenue: .*", invoices) == re.findall(
            r"match rate .*|revenue: .*", INVOICES_SEEN[1]
        )


def test_seed_step_loads_the_dataset_into_an_existing_broker(broker: LocalBroker) -> None:
    purchases = 500
    done = run_demo(
        "--step", "seed", "--bootstrap-servers", broker.bootstrap_servers, "--purchases", str(purchases)
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "[2/2] creating topics" in done.stdout
    dataset = build_dataset(purchases)

    products = latest_per_key(
        r for records in read_topic(broker.bootstrap_servers, "products").values() for r in records
    )
    assert {k.decode(): json.loads(v) for k, v in products.items()} == {
        k: v for k, v in dataset.products.items() if k in dataset.live_products()
    }
    customers = latest_per_key(
        r for records in read_topic(broker.bootstrap_servers, "customers").values() for r in records
    )
    assert {k.decode(): json.loads(v) for k, v in customers.items()} == dataset.customers

    purchase_records = [
        r for records in read_topic(broker.bootstrap_servers, "purchases").values() for r in records
    ]
    assert sorted((k.decode(), json.loads(v)) for k, v in purchase_records if k and v) == sorted(
        (p["purchase_id"], p) for p in dataset.purchases()
    )
    assert len(purchase_records) == purchases


@pytest.fixture
def interrupted_demo() -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        demo_command("--purchases", "2000"),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


def test_ctrl_c_shuts_down_cleanly_with_status_130(interrupted_demo: subprocess.Popen[str]) -> None:
    assert interrupted_demo.stdout is not None
    seen: list[str] = []
    for line in interrupted_demo.stdout:
        seen.append(line)
        if line.startswith("[3/6]"):  # broker up, data loaded, the service starting
            break
    else:
        pytest.fail("the demo ended before starting its service:\n" + "".join(seen))
    interrupted_demo.send_signal(signal.SIGINT)
    rest, errors = interrupted_demo.communicate(timeout=180)
    output = "".join(seen) + rest
    assert interrupted_demo.returncode == 130, f"stdout:\n{output}\nstderr:\n{errors}"
    assert "interrupted: shutting down" in output
    assert "error" not in output, "a Ctrl-C is how a user stops the demo, not an error"
    assert "stopping the embedded broker" in output
    assert "Traceback" not in errors


@pytest.mark.parametrize("seeded", [True, False])
def test_join_against_a_service_without_the_demo_data_says_so(
    seeded: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A broker of its own: the demo's topic names are fixed, and other tests seed the session broker.
    with LocalBroker() as own_broker:
        if seeded:
            steps.seed(Console(2, io.StringIO()), own_broker.bootstrap_servers, purchases=10)
        else:
            for topic in ("products", "customers"):
                create_topic(own_broker.bootstrap_servers, topic)
        with running_service(own_broker.bootstrap_servers, tmp_path / "state") as url:
            if seeded:
                steps.check_demo_data(url)
                return
            status = run(build_parser().parse_args(["demo", "--step", "join", "--service-url", url]))
    output = capsys.readouterr().out
    assert status == 1, output
    assert f"error: the service at {url} does not hold the demo's data" in output
    assert "in products" in output
    assert "in customers" in output
    assert "statestore demo --step seed --bootstrap-servers" in output
    assert "match rate" not in output
    assert "stopping Spark" not in output, "Spark was started for a join that could not run"


def test_missing_java_is_reported_with_how_to_install_it(tmp_path: Path) -> None:
    done = run_demo("--purchases", "10", env={"JAVA_HOME": str(tmp_path / "no-jdk")}, timeout=120)
    assert done.returncode == 1
    assert "needs a Java runtime" in done.stdout
    assert "openjdk-17" in done.stdout
    assert "[1/6]" not in done.stdout  # nothing was started
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--step", "seed"], "--step seed needs --bootstrap-servers"),
        (["--step", "join"], "--step join needs --service-url"),
        (["--service-url", "http://127.0.0.1:1"], "--service-url also needs --bootstrap-servers"),
        (["--purchases", "0"], "--purchases must be at least 1"),
        (["--shards", "11"], "--shards must be between 1 and 10"),
        (["--shards", "2", "--step", "join", "--service-url", "http://x"], "--shards starts the demo's own"),
    ],
)
def test_inconsistent_arguments_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(build_parser().parse_args(["demo", *argv])) == 2
    assert message in capsys.readouterr().out


def test_dataset_is_deterministic_and_realistic() -> None:
    first, again = build_dataset(3000), build_dataset(3000)
    assert first == again
    assert list(first.purchases()) == list(again.purchases())
    assert len(first.products) == 2000
    assert len(first.customers) == 5000
    assert set(first.discontinued) < set(first.products)
    purchases = list(first.purchases())
    assert len({p["purchase_id"] for p in purchases}) == 3000
    unknown = [p for p in purchases if p["product_id"] not in first.products]
    discontinued = [p for p in purchases if p["product_id"] in first.discontinued]
    assert 0 < len(unknown) < 60
    assert 0 < len(discontinued) < 150
    # Popularity is skewed: the best seller sells far more than an average product.
    counts: dict[str, int] = {}
    for p in purchases:
        counts[p["product_id"]] = counts.get(p["product_id"], 0) + 1
    assert max(counts.values()) > 10 * len(purchases) / len(first.products)
    assert all(v["unit_price"] > 0 and v["category"] and v["name"] for v in first.products.values())


def test_table_aligns_numbers_right_and_shows_nulls() -> None:
    lines = table(["id", "price"], [["a", 1.5], ["bbb", None], ["c", 1234.0]])
    assert lines == [
        "id      price",
        "---  --------",
        "a        1.50",
        "bbb         -",
        "c    1,234.00",
    ]
