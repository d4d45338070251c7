"""The poll-and-apply step: the materializer's loop once it reads records itself.

Each step (:meth:`ApplyLoop.step`, as Kafka Streams' ``StateConsumer.pollAndUpdate``) takes one
poll from the record source, applies its records as one atomic write (records, tombstones and the
next offset of every partition read), and moves each partition's catch-up. A restoring store is
READY once every partition is caught up; a READY one does its periodic work between steps
(checkpoints, history pruning, a page of its key count, topic metadata checks).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable

from store.formats import decode_until_done
from store.formats.errors import ShapeChangedError
from store.formats.keys import schema_id
from store.json_values import checked_json
from store.kafka.batch import RecordBatch
from store.kafka.catchup import CatchUp, PartitionCatchUp
from store.kafka.client import RebuildRequired, TopicWatch
from store.kafka.source import RecordSource
from store.lifecycle.config import StoreConfig
from store.lifecycle.gc_pacing import fewer_collections
from store.lifecycle.progress import Progress
from store.lifecycle.reporter import Reporter
from store.lifecycle.settle import settle_restored_files
from store.lifecycle.timing import Every
from store.lifecycle.writer import StoreCopies, check_written_copy
from store.state import StoreState


class ApplyLoop:
    """Poll and apply until stopped, or until the first fetches tell that enough records are left
    for a bulk restore (``wants_bulk``; never once one ran in this session: ``after_bulk``)."""

    def __init__(
        self,
        config: StoreConfig,
        copies: StoreCopies,
        source: RecordSource,
        catch_up: CatchUp,
        watch: TopicWatch,
        reporter: Reporter,
        stop: threading.Event,
        wants_bulk: Callable[[], bool],
        after_bulk: bool,
    ) -> None:
        self._config = config
        self._copies = copies
        self._source = source
        self._catch_up = catch_up
        self._watch = watch
        self._reporter = reporter
        self._progress: Progress = reporter.progress
        self._stop = stop
        self._wants_bulk = wants_bulk
        self._after_bulk = after_bulk
        self.restoring = copies.state is not StoreState.READY
        # Nothing was served yet: READY comes with every index built.
        self._build_indexes_first = self.restoring and (not copies.writer.position or after_bulk)
        tuning, now = config.tuning, time.monotonic()
        self._progress_log = Every(tuning.restore.progress_log_interval_seconds, now)
        self._checkpoint = Every(tuning.maintenance.checkpoint_interval_seconds, now)
        self._history_prune = Every(tuning.maintenance.history_prune_interval_seconds, now)
        self._metadata_check = Every(tuning.consumer.metadata_check_interval_seconds, now)
        self._pacing = contextlib.ExitStack()

    def run(self) -> bool:
        """Step until stopped (``False``) or until a bulk restore should take over (``True``)."""
        if self.restoring:
            self._pacing.enter_context(fewer_collections(self._config.tuning.restore.gc_threshold))
        try:
            if self.restoring and self._catch_up.done:
                self._finish_restore()  # a bulk restore read everything: no poll to wait for
            while not self._stop.is_set():
                if self.step():
                    return True
            return False
        finally:
            self._pacing.close()

    def step(self) -> bool:
        """Apply one poll; ``True`` when a bulk restore should take over."""
        progress, catch_up = self._progress, self._catch_up
        polled_at = time.monotonic()
        writer = self._copies.writer
        check_written_copy(writer)
        placement = self._reporter.placement
        # Natural keys under several key schema ids are resolved by each record's time and offset.
        poll = self._source.poll(writer.keeps_history or self._config.key_codec is not None, placement.active)
        records = poll.records
        self._reporter.fetch_events(poll.events, catch_up)
        catch_up.read(records.next_offsets)
        if poll.messages:
            progress.last_contact = time.monotonic()
        self._reporter.null_keys(records.null_keys)
        # The producers' bytes, before keys are decoded: what placement is checked on.
        produced = dataclasses.replace(records) if self._config.key_codec is not None else records
        if not self._values_as_stored(records):
            return False  # stopped while waiting: nothing of this poll was written
        if records.next_offsets:
            writer.apply(records)
            if not self.restoring:
                progress.freshness.observe(records.oldest_timestamp_ms, time.time())
            progress.count(len(produced))
            placement.batch(produced)
        if poll.messages:
            # Records (or an end of partition) arrived and were taken: earlier errors are over.
            progress.note_healthy(polled_at)
        self._take_high_watermarks(poll.high_watermarks)
        if self.restoring and catch_up.done:
            self._finish_restore()
        elif self.restoring and not self._after_bulk and self._wants_bulk():
            return True
        self._periodic(time.monotonic())
        return False

    def _values_as_stored(self, records: RecordBatch) -> bool:
        """Turn ``records``' keys and values into what the store keeps: decoded (``key_codec``,
        ``value_codec``), values checked as JSON (``json_values``); ``False`` when stopped while a
        codec waited for its registry."""
        # Keys first: a shard keeping natural keys by their own hash decodes only its values.
        for codec, field in ((self._config.key_codec, "keys"), (self._config.value_codec, "values")):
            column = getattr(records, field)
            if codec is None or not column:
                continue
            try:
                decoded = decode_until_done(codec, column, self._stop, self._progress.note_error)
            except ShapeChangedError as exc:
                raise RebuildRequired(str(exc)) from exc
            if decoded is None:
                return False
            setattr(records, field, decoded)
            if field == "keys":
                records.schema_ids = [schema_id(key) for key in column]
                kept = self._config.sharding.kept(records.keys, self._watch.partitions)
                if kept is not None:
                    records.keep(kept)
        if self._config.json_values and records.values:
            records.values = checked_json(records.values)
        return True

    def _take_high_watermarks(self, highs: dict[int, int]) -> None:
        if not highs:
            return
        progress, catch_up = self._progress, self._catch_up
        progress.end_offsets = {**progress.end_offsets, **highs}
        raised = catch_up.saw_high_watermarks(highs)
        if raised or (catch_up.refined and not progress.restore_target_refined):
            progress.raise_target(catch_up.targets(), catch_up.refined)

    def _periodic(self, now: float) -> None:
        if self.restoring and self._progress_log.due(now):
            self._reporter.restore_progress(self._copies.writer.position)
        if not self.restoring:
            # A page a step, once counting is due: it never holds the next poll back for long.
            self._copies.writer.count_keys()
        if not self.restoring and self._history_prune.due(now):
            self._copies.writer.maintain_history()
            self._copies.writer.maintain_winners()
        if not self.restoring and self._checkpoint.due(now):
            self._copies.writer.engine.flush()
        if self._metadata_check.due(now):
            self._check_metadata(now)

    def _check_metadata(self, now: float) -> None:
        """Pick up new partitions; ends the session when the topic was deleted or recreated."""
        before = self._watch.partitions
        added = self._watch.check()
        sharding = self._config.sharding
        if added and sharding.sharded:
            # Keys hash over the new count: most move to other partitions, some to other shards.
            raise RebuildRequired(
                f'topic "{self._config.topic}" grew from {before} to {self._watch.partitions} partitions,'
                f" so keys hash to other partitions; shard {sharding.shard} of {sharding.shards} reads"
                f" its partitions {sharding.own(self._watch.partitions)} again"
            )
        if added:
            self._reporter.placement.topic_partitions = self._watch.partitions
            self._source.add_partitions(added)
            for partition in added:
                self._catch_up.add(PartitionCatchUp(partition))
            self._reporter.log.info(
                'store "%s": topic "%s" grew from %d to %d partitions; reading the new ones from the start',
                self._config.name,
                self._config.topic,
                before,
                self._watch.partitions,
            )
        # The broker answered: an idle topic is not a lost broker.
        self._progress.last_contact = time.monotonic()
        self._progress.note_healthy(now)

    def _finish_restore(self) -> None:
        stop = self._stop
        writer = self._copies.writer
        if self._after_bulk:
            # Before the flush (its file would count as a restored one), and before indexes are
            # built (they read the table): READY comes with the table as fast as it will be.
            settle_restored_files(writer.engine, self._progress, stop, self._reporter.log, self._config.name)
            if stop.is_set():
                return
        if self._build_indexes_first:
            writer.build_indexes(stop)
        writer.engine.flush()
        self.restoring = False
        self._pacing.close()
        self._become_ready()
        # An index added to an existing store is built from the READY table, so reads of the
        # store go on meanwhile (that index answers IndexNotReadyError). READY may have swapped a
        # rebuilt copy in: the writer is asked for again.
        self._copies.writer.build_indexes(stop)

    def _become_ready(self) -> None:
        progress, copies = self._progress, self._copies
        elapsed = time.monotonic() - progress.restore_started_at
        copies.writer.begin_history(self._watch.partitions)
        # Logged before the state changes: whoever waits for READY then finds the line written.
        self._reporter.log.info(
            'store "%s" READY at position %s: %d records applied in %.1fs (%.0f records/s)',
            self._config.name,
            copies.writer.position,
            progress.restore_applied,
            elapsed,
            progress.restore_applied / elapsed if elapsed > 0 else 0.0,
        )
        copies.transition(StoreState.READY)
