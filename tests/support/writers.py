"""A background writer of keyed updates and tombstones, for tests that crash stores under load."""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence

from confluent_kafka import KafkaError, Message

from store import Position
from tests.support.kafka import Record, close_producer, latest_per_key, make_producer, topic_end


class KeyedWriter:
    """Keeps producing keyed updates and tombstones on a thread while resumed; remembers them all.

    Each turn writes ``burst`` records over ``keys`` keys (``key_format``, e.g. ``b"key-%05d"``),
    one in ``tombstone_every`` a tombstone, then rests ``pace`` seconds. :meth:`pause` waits until
    everything written is delivered and returns the model and end of the topic.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        seed: int,
        keys: int,
        key_format: bytes = b"key-%05d",
        tombstone_every: int = 6,
        burst: int = 50,
        pace: float = 0.005,
    ) -> None:
        self.topic = topic
        self._bootstrap_servers = bootstrap_servers
        self.producer = make_producer(bootstrap_servers, **{"enable.idempotence": "true"})
        self.records: list[Record] = []
        self.ends: dict[int, int] = {}
        self.errors: list[KafkaError] = []
        self._rng = random.Random(seed)
        self._keys = keys
        self._key_format = key_format
        self._tombstone_every = tombstone_every
        self._burst = burst
        self._pace = pace
        self._writing = threading.Event()
        self._parked = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="keyed-writer", daemon=True)
        self._thread.start()

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.errors.append(error)
            return
        partition, offset = message.partition(), message.offset()
        assert partition is not None
        assert offset is not None
        self.ends[partition] = max(self.ends.get(partition, 0), offset + 1)

    def _loop(self) -> None:
        while not self._closed:
            if not self._writing.is_set():
                self.producer.flush(30)
                self._parked.set()
                self._writing.wait(0.05)
                continue
            for _ in range(self._burst):
                self._write_one()
            self.producer.poll(self._pace)

    def _write_one(self) -> None:
        rng = self._rng
        key = self._key_format % rng.randrange(self._keys)
        value = None if rng.randrange(self._tombstone_every) == 0 else b"w%d" % len(self.records)
        self.records.append((key, value))
        while True:
            try:
                self.producer.produce(self.topic, key=key, value=value, on_delivery=self._delivered)
                return
            except BufferError:
                self.producer.poll(0.01)

    def resume(self) -> None:
        self._parked.clear()
        self._writing.set()

    def pause(
        self, seed: Sequence[Record] = (), seed_end: Position | None = None
    ) -> tuple[dict[bytes, bytes], Position]:
        """Stop writing and wait until all is delivered; the model and end offsets of the whole
        topic, ``seed`` being what was in it before this writer (up to ``seed_end``)."""
        self._writing.clear()
        assert self._parked.wait(60), "the writer did not stop"
        assert not self.errors, self.errors[:3]
        delivered = (seed_end or Position()).merged(self.ends)
        end = topic_end(self._bootstrap_servers, self.topic, at_least=delivered)
        # Every delivered record is in the topic (a retried batch may be there twice).
        assert end.reaches(delivered), (end, delivered)
        return latest_per_key([*seed, *self.records]), end

    def close(self) -> None:
        self._writing.clear()
        self._closed = True
        self._thread.join(timeout=60)
        close_producer(self.producer)
