"""A record source whose Kafka client runs in a child process (``store/kafka/consumer_process.py``).

A crash inside librdkafka (it has crashed with SIGSEGV on a topic deleted under an assigned
consumer) then ends the child, never the process that serves reads: the source raises
:class:`SourceCrashedError`, the materializer's session ends, reads go on from the last good copy,
and the next session starts another child. What was applied is recorded with its offsets, and
the next session reads from there: no record is lost or applied twice.

Polls are asked one ahead: while the store applies one poll, the child reads the next.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from store.kafka.batch import KafkaErrorReport
from store.kafka.children import ChildProcess, describe_exit
from store.kafka.client import TopicInfo, TransientSourceError, admin_config, consumer_config
from store.kafka.log import KafkaLog
from store.kafka.pipes import MessageReader, write_message
from store.kafka.polls import Poll
from store.tuning import ConsumerTuning

_MODULE = "store.kafka.consumer_process"
# How much longer than a request's own timeout the child may take to answer before it is taken
# for hung, killed and replaced: a loaded machine can pause a process for seconds.
_ANSWER_MARGIN_SECONDS = 30.0


class SourceCrashedError(TransientSourceError):
    """The Kafka client's process died (a crash, a kill) or stopped answering; a new session
    starts another."""


class ChildConsumerSource:
    """A manually assigned consumer (no group, no commits) and an admin client in a child process.

    ``on_client_error`` is called for errors the client reports for itself (the broker
    unreachable, ...); librdkafka's log lines go to ``kafka_log``. ``always_metas``: every poll
    brings each record's partition, offset and timestamp (a store that keeps history needs them
    from the poll on that its history begins, and polls are asked one ahead).
    """

    def __init__(
        self,
        store_name: str,
        topic: str,
        kafka: Mapping[str, Any],
        on_client_error: Callable[[KafkaErrorReport], None],
        kafka_log: KafkaLog,
        tuning: ConsumerTuning,
        always_metas: bool,
    ) -> None:
        self._topic = topic
        self._on_client_error = on_client_error
        self._kafka_log = kafka_log
        self._poll_timeout = tuning.poll_timeout_seconds
        self._always_metas = always_metas
        self._asked_ahead = False  # a poll is asked and not yet answered
        self._held: Poll | None = None  # a poll answered and not yet taken
        self._process = ChildProcess(_MODULE)
        self._answers = MessageReader(self._process.stdout.fileno())
        self._send(
            {
                # Through the pipe, never the command line: the settings hold credentials.
                "consumer_config": consumer_config(store_name, kafka),
                "admin_config": admin_config(kafka),
                "topic": topic,
                "poll_max_records": tuning.poll_max_records,
                "poll_timeout_seconds": tuning.poll_timeout_seconds,
            }
        )

    @property
    def pid(self) -> int:
        """The child process's id."""
        return self._process.pid

    # -- RecordSource -------------------------------------------------------------------------

    def describe(self, timeout: float) -> TopicInfo | None:
        answer = self._call(("describe", timeout), timeout)
        if answer[0] == "missing":
            return None
        _kind, topic_id, partitions = answer
        return TopicInfo(self._topic, topic_id, partitions)

    def list_offsets(self, partitions: Iterable[int], timeout: float) -> dict[int, tuple[int, int]]:
        partitions = list(partitions)
        offsets: dict[int, tuple[int, int]] = self._call(("list_offsets", partitions, timeout), timeout)[1]
        return offsets

    def assign(self, starts: Mapping[int, int]) -> None:
        self._call(("assign", dict(starts)), self._poll_timeout)
        self._held = None  # read under the assignment replaced: read again from ``starts``

    def add_partitions(self, partitions: Iterable[int]) -> None:
        self._call(("add_partitions", list(partitions)), self._poll_timeout)

    def poll(self, with_metas: bool, with_partitions: bool = False) -> Poll:
        if self._held is not None:
            taken, self._held = self._held, None
        else:
            if not self._asked_ahead:
                self._ask_poll(with_metas, with_partitions)
            taken = self._take_poll()
        # The child reads the next one while this one is applied.
        self._ask_poll(with_metas, with_partitions)
        return taken

    def close(self) -> None:
        self._process.end(stop=True, grace_seconds=5.0)

    # -- the pipe -------------------------------------------------------------------------------

    def _ask_poll(self, with_metas: bool, with_partitions: bool) -> None:
        self._send(("poll", with_metas or self._always_metas, with_partitions))
        self._asked_ahead = True

    def _take_poll(self) -> Poll:
        answer = self._answer(self._poll_timeout)
        self._asked_ahead = False
        return Poll.from_fields(answer[1])

    def _call(self, request: tuple[Any, ...], timeout: float) -> tuple[Any, ...]:
        if self._asked_ahead:
            self._held = self._take_poll()
        self._send(request)
        return self._answer(timeout)

    def _send(self, message: Any) -> None:
        try:
            write_message(self._process.stdin.fileno(), message)
        except OSError as exc:
            raise self._crashed() from exc

    def _answer(self, timeout: float) -> tuple[Any, ...]:
        """The answer to the oldest request, taking the reports that come before it."""
        limit = timeout + _ANSWER_MARGIN_SECONDS
        deadline = time.monotonic() + limit
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._process.kill()
                raise SourceCrashedError(
                    f"the Kafka client process (pid {self._process.pid}) did not answer within"
                    f" {limit:.0f}s; it was killed"
                )
            try:
                message = self._answers.read(left)
            except EOFError:
                raise self._crashed() from None
            if message is None:
                continue
            kind = message[0]
            if kind == "log":
                self._kafka_log.line(*message[1:])
            elif kind == "client_error":
                _kind, code, text, fatal = message
                self._on_client_error(KafkaErrorReport(code, text, fatal, None))
            elif kind == "failed":
                raise TransientSourceError(f"the Kafka client failed: {message[1]}")
            else:
                answer: tuple[Any, ...] = message
                return answer

    def _crashed(self) -> SourceCrashedError:
        code = self._process.end(stop=False, grace_seconds=2.0)
        return SourceCrashedError(f"the Kafka client process (pid {self._process.pid}) {describe_exit(code)}")
