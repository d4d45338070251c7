"""What the materializer's phases report: fetch events, client errors, null keys, restore progress."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

from store.kafka.batch import KafkaErrorReport
from store.kafka.catchup import CatchUp
from store.kafka.client import check_fetch_error
from store.kafka.log import KafkaLog
from store.lifecycle.progress import Progress
from store.lifecycle.sharding import PlacementCheck


class Reporter:
    """What the materializer's phases report, counted in ``progress`` and logged: fetch events
    and client errors (some end the session: ``store.kafka.client.check_fetch_error``), the Kafka
    clients' own log lines (``kafka_log``, once per distinct problem), records skipped for their
    null key, how far a restore is, and (``placement``) records not on their key's partition."""

    def __init__(
        self,
        store: str,
        topic: str,
        progress: Progress,
        log: logging.LoggerAdapter[logging.Logger],
        placement: PlacementCheck,
        brokers: str | None = None,
    ) -> None:
        self.store = store
        self.topic = topic
        self.progress = progress
        self.log = log
        self.kafka_log = KafkaLog(store, log, brokers=brokers)
        self.placement = placement

    def fetch_events(self, reports: Iterable[KafkaErrorReport], catch_up: CatchUp) -> None:
        """An end of partition counts towards the catch-up; an error the session cannot go on with
        raises ``RebuildRequired`` or ``TransientSourceError``; any other error is noted."""
        for report in reports:
            if report.end_of_partition:
                if report.partition is not None:
                    catch_up.ended([report.partition])
                self.progress.last_contact = time.monotonic()
                continue
            check_fetch_error(report, self.topic)
            self.progress.note_error(f"kafka: {report.text}")

    def client_error(self, report: KafkaErrorReport) -> None:
        """An error the Kafka client reported for itself (the broker unreachable, ...)."""
        self.progress.note_error(f"kafka: {report.text}")
        self.kafka_log.client_error(report)

    def null_keys(self, count: int) -> None:
        if count:
            self.progress.null_keys += count
            self.log.warning(
                'store "%s": skipped %d records with a null key (total %d); a table needs keys',
                self.store,
                count,
                self.progress.null_keys,
            )

    def restore_progress(self, position: Mapping[int, int]) -> None:
        self.log.info('store "%s" restoring: %s', self.store, self.progress.describe_restore(position))
