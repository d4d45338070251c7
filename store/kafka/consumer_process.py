"""The store's Kafka client in a child process (started by ``store.kafka.children.ChildProcess``).

librdkafka has crashed its whole process (SIGSEGV) when the topic a consumer was assigned was
deleted. Here such a crash ends only this process: the store keeps serving its last good copy and
starts another one (``store.kafka.child_source``). The consumer and the admin client (topic metadata)
both live here; the store's process holds no Kafka client of its own.

The store writes requests to stdin and reads answers from stdout, as frames (``store.kafka.pipes``) of
tuples ``(kind, *values)``. The first message is the job: a dict with ``consumer_config`` and
``admin_config`` (credentials included, hence never on the command line), ``topic``,
``poll_max_records`` and ``poll_timeout_seconds``. Every request gets one answer, in order, after
the log lines and client errors the Kafka client reported since the previous answer
(``("log", level, facility, text)``, ``("client_error", code, text, fatal)``):

=================================  ===============================================================
request                            answer
=================================  ===============================================================
``("describe", timeout)``          ``("described", topic_id, partitions)`` or ``("missing",)``
``("list_offsets", parts, t)``     ``("offsets", {partition: (first, end)})``
``("assign", {p: offset})``        ``("done",)``
``("add_partitions", [p])``        ``("done",)``
``("poll", metas, partitions)``     ``("polled", poll fields)`` (``store.kafka.polls.Poll.fields``)
any                                ``("failed", text)`` when the Kafka client raised
=================================  ===============================================================

It exits when its stdin ends: the store closed it, or the store's process is gone.

Run as a child (``python -m store.kafka.consumer_process``, see ``store.kafka.children``) it imports
only ``store.kafka`` and the store's shared leaves, never the table (RocksDB) nor the lifecycle.
"""

from __future__ import annotations

import sys
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from store.kafka import calls, pipes, polls

_STDIN, _STDOUT = 0, 1
_MAX_HELD_LINES = 1_000  # log lines and client errors held between two answers; more are dropped


class _Reports:
    """What the Kafka clients report through their callbacks, held until the next answer.

    Its ``log`` method is the ``logger`` the clients are given: librdkafka's lines go to the store
    through the pipe, never raw to stderr.
    """

    def __init__(self) -> None:
        self.held: list[tuple[Any, ...]] = []

    def log(self, level: int, _format: str, facility: str, _client: str, text: str, *_rest: Any) -> None:
        if len(self.held) < _MAX_HELD_LINES:
            self.held.append(("log", level, facility, text))

    def client_error(self, error: KafkaError) -> None:
        if len(self.held) < _MAX_HELD_LINES:
            self.held.append(("client_error", error.code(), error.str(), error.fatal()))

    def send(self) -> None:
        held, self.held = self.held, []
        for report in held:
            pipes.write_message(_STDOUT, report)


class _Client:
    """The consumer (manually assigned, no group, no commits) and the admin client of one topic."""

    def __init__(self, job: dict[str, Any], reports: _Reports) -> None:
        self.topic: str = job["topic"]
        self.max_records: int = job["poll_max_records"]
        self.timeout: float = job["poll_timeout_seconds"]
        self.partitions: list[int] = []
        consumer_config: dict[str, Any] = {
            **job["consumer_config"],
            "logger": reports,
            "error_cb": reports.client_error,
        }
        admin_config: dict[str, Any] = {**job["admin_config"], "logger": reports}
        self.consumer = Consumer(consumer_config)
        self.admin = AdminClient(admin_config)

    def answer(self, request: tuple[Any, ...]) -> tuple[Any, ...]:
        kind, *values = request
        if kind == "poll":
            messages = calls.poll(self.consumer, self.max_records, self.timeout)
            highs = calls.cached_high_watermarks(self.consumer, self.topic, self.partitions)
            return ("polled", polls.Poll.of(messages, values[0], highs, values[1]).fields())
        if kind == "describe":
            described = calls.describe(self.admin, self.topic, values[0])
            self.admin.poll(0)  # serves the admin client's log lines
            return ("missing",) if described is None else ("described", *described)
        if kind == "list_offsets":
            partitions, timeout = values
            return ("offsets", calls.list_offsets(self.consumer, self.topic, partitions, timeout))
        if kind == "assign":
            starts: dict[int, int] = values[0]
            self.consumer.assign([TopicPartition(self.topic, p, offset) for p, offset in starts.items()])
            self.partitions = sorted(starts)
            return ("done",)
        if kind == "add_partitions":
            added = [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in values[0]]
            self.consumer.incremental_assign(added)
            self.partitions = sorted({*self.partitions, *values[0]})
            return ("done",)
        raise ValueError(f"unknown request {kind!r}")

    def close(self) -> None:
        self.consumer.close()


def main() -> int:
    """Answer the store's requests until stdin ends."""
    requests = pipes.MessageReader(_STDIN)
    try:
        job = requests.read(None)
    except EOFError:
        return 0
    reports = _Reports()
    client: _Client | None = None
    try:
        while True:
            try:
                request = requests.read(None)
            except EOFError:
                return 0
            try:
                if client is None:
                    client = _Client(job, reports)
                answer = client.answer(request)
            except Exception as exc:  # the store decides: retry, or a new session
                answer = ("failed", f"{type(exc).__name__}: {exc}")
            reports.send()
            pipes.write_message(_STDOUT, answer)
    except BrokenPipeError:
        return 0  # the store stopped reading
    finally:
        if client is not None:
            client.close()


if __name__ == "__main__":
    sys.exit(main())
