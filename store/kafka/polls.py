"""One poll of a record source: its records, fetch events and high watermarks, and their pipe form.

The consumer process (``store.kafka.consumer_process``) sends a poll as plain values
(:meth:`Poll.fields`) in a frame of ``store.kafka.pipes``; the store's side reads it back
(:meth:`Poll.from_fields`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Message

from store.kafka.batch import KafkaErrorReport, RecordBatch


@dataclasses.dataclass(frozen=True, slots=True)
class Poll:
    """What one poll of a record source brought: records, the fetch events that came with them
    (end of partition, errors), and the high watermarks of the latest fetch responses."""

    records: RecordBatch
    events: list[KafkaErrorReport]
    high_watermarks: dict[int, int]
    messages: int  # records and events together: none means the broker had nothing to say

    @classmethod
    def of(
        cls,
        messages: list[Message],
        with_metas: bool,
        high_watermarks: dict[int, int],
        with_partitions: bool = False,
    ) -> Poll:
        records = RecordBatch.collecting(with_metas, with_partitions)
        events = records.add(messages)
        return cls(records, events, high_watermarks, len(messages))

    def fields(self) -> list[Any]:
        """The poll as plain values (for a pipe: see :meth:`from_fields`)."""
        records = self.records
        return [
            records.keys,
            records.values,
            records.next_offsets,
            records.metas,
            records.null_keys,
            [(event.code, event.text, event.fatal, event.partition) for event in self.events],
            self.high_watermarks,
            self.messages,
            records.partitions,
            records.oldest_timestamp_ms,
        ]

    @classmethod
    def from_fields(cls, fields: Sequence[Any]) -> Poll:
        keys, values, next_offsets, metas, null_keys, events, highs, messages, partitions, oldest = fields
        records = RecordBatch(keys, values, next_offsets, metas, null_keys, partitions, oldest)
        return cls(records, [KafkaErrorReport(*event) for event in events], highs, messages)
