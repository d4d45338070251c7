"""The materializer: one thread that keeps a store equal to its topic.

Each *session* validates the stored offsets against the topic, samples the end offsets, and
reads: first in bulk (``store.lifecycle.bulkload``: worker processes write SST files) while many records are
left to restore, then record by record (``store.lifecycle.apply_loop``: each poll one atomic write of
records, tombstones and the next offset of every partition read). The store is READY once every
partition is caught up (``store.kafka.batch.CatchUp``): it reported end-of-partition, or was read up
to the high watermark that fetch responses carry. The ListOffsets answer sampled at start is only
a lower bound for the restore target (some brokers answer it too low).

A session reads through a record source (``store.kafka.source``): by default the Kafka client runs in
a child process (``store.kafka.child_source``), so that a crash inside it cannot stop the reads.

Problems end a session and decide what comes next (:meth:`Materializer._run`): stored offsets
no longer valid, or the written copy found corrupt → rebuild from the earliest offsets; the
volume refuses writes → the reaction to that kind of refusal (``store.lifecycle.write_errors``: wait for
space, retry, or FAILED after an I/O error that does not pass); the Kafka client's process died
→ one line, and another after a backoff; a broker or topic problem → retry with backoff. Reads go
on meanwhile from the copy as it is. The thread never dies of these. It writes through the
store's copies (``store.lifecycle.writer``), never through ``Store``.
"""

from __future__ import annotations

import logging
import re
import threading
import time

from confluent_kafka import OFFSET_BEGINNING

from store.exceptions import (
    StoreClosedError,
    StoreFullError,
    StoreReadError,
    StoreWriteError,
    StoreWriterClosedError,
)
from store.json_values import unchecked_reason
from store.kafka.catchup import CatchUp, PartitionCatchUp
from store.kafka.child_source import ChildConsumerSource, SourceCrashedError
from store.kafka.client import (
    RebuildRequired,
    TopicInfo,
    TopicWatch,
    TransientSourceError,
)
from store.kafka.log import OncePerInterval
from store.kafka.source import ConsumerSource, RecordSource
from store.lifecycle.apply_loop import ApplyLoop
from store.lifecycle.bulkload import BulkPhase, BulkVolumeFullError
from store.lifecycle.config import StoreConfig
from store.lifecycle.progress import Progress
from store.lifecycle.reporter import Reporter
from store.lifecycle.restore_slots import RestoreSlots
from store.lifecycle.sharding import PlacementCheck, natural_keys_reason
from store.lifecycle.timing import Backoff
from store.lifecycle.write_errors import WriteErrors
from store.lifecycle.writer import StoreCopies, TableWriter, check_written_copy
from store.state import RestoreMode, StoreState
from wire.position import Position

logger = logging.getLogger(__name__)

# A session that ran this long before its Kafka client's process died was healthy: the next
# restart waits the shortest backoff again.
_HEALTHY_SESSION_SECONDS = 60.0
_NUMBERS = re.compile(r"\d+")
_METADATA_TIMEOUT_SECONDS = 10.0


class Materializer:
    """Runs sessions on its own thread until ``stop()``; never dies on broker errors."""

    def __init__(self, config: StoreConfig, copies: StoreCopies, restore_slots: RestoreSlots) -> None:
        self._config = config
        self._copies = copies
        self._tuning = config.tuning
        self._restore_slots = restore_slots
        self.progress = Progress()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"materializer-{config.name}", daemon=True)
        self._log = logging.LoggerAdapter(logger, {"store": config.name})
        self.placement = PlacementCheck(config.name, config.sharding, self._log)
        brokers = config.kafka.get("bootstrap.servers")
        self._reporter = Reporter(
            config.name,
            config.topic,
            self.progress,
            self._log,
            self.placement,
            brokers=str(brokers) if brokers is not None else None,
        )
        # The same broker or topic problem is logged once a minute, not at every retry.
        self._warnings = OncePerInterval(self._log)
        self._write_errors = WriteErrors(config, copies, self.progress, self._log, self._stop)
        self._silence: str | None = None  # the error noted while the Kafka client's process is silent
        # Off once the volume was found full: the rest of the restore goes record by record.
        self._bulk_allowed = True

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _written_position(self) -> Position:
        """The position of the copy being written (none while a full volume keeps it closed)."""
        try:
            return self._copies.writer.position
        except StoreClosedError:
            return Position()

    # -- the loop and its reactions -----------------------------------------------------------

    def _run(self) -> None:
        retry = self._tuning.retry
        backoff = Backoff(retry.backoff_initial_seconds, retry.backoff_max_seconds)
        restarts = Backoff(retry.backoff_initial_seconds, retry.backoff_max_seconds)
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                writer = self._copies.open_writer()
                check_written_copy(writer)
                self._session(writer, backoff)
            except RebuildRequired as signal:
                self._log.warning(
                    'store "%s": %s; rebuilding from the earliest offsets',
                    self._config.name,
                    signal.reason,
                )
                self.progress.note_error(signal.reason)
                self.placement.reset()
                self._bulk_allowed = True
                self._copies.rebuild(signal.reason)
            except StoreReadError as exc:
                # Before write errors: a write refused for corruption is both. The copy is marked
                # corrupt (and logged), and the next turn rebuilds it.
                self.progress.note_error(str(exc))
                if not self._copies.report_corruption(exc):  # nothing to rebuild (stopping)
                    backoff.wait(self._stop)
            except StoreWriterClosedError:
                backoff.wait(self._stop)  # the store is stopping: nothing to say
            except BulkVolumeFullError as exc:
                self._bulk_allowed = False
                self._write_errors.bulk_volume_full(exc)
            except StoreFullError as exc:
                self._bulk_allowed = False  # a bulk restore would fill the volume again
                self._write_errors.wait_for_space(exc, backoff)
            except StoreWriteError as exc:
                if not self._write_errors.retry_after_failure(exc, backoff):
                    return  # FAILED
            except SourceCrashedError as exc:
                if time.monotonic() - began > _HEALTHY_SESSION_SECONDS:
                    restarts.reset()
                self._restart_source(exc, restarts)
            except TransientSourceError as exc:
                self.progress.note_error(str(exc))
                message = f'store "{self._config.name}": {exc}; retrying'
                self._warnings.log(logging.WARNING, _NUMBERS.sub("#", message), message)
                backoff.wait(self._stop)
            except Exception as exc:
                self.progress.note_error(f"{type(exc).__name__}: {exc}")
                self._log.exception('store "%s": materializer error; retrying', self._config.name)
                backoff.wait(self._stop)

    def _restart_source(self, crash: SourceCrashedError, restarts: Backoff) -> None:
        """The Kafka client's process died: say so in one line, and start another after a backoff."""
        delay = restarts.next_delay()
        message = (
            f'{crash} while reading topic "{self._config.topic}"; reads go on from the last good copy'
            f" at position {self._written_position() or 'none'}, staler each second until it is back;"
            f" starting another in {delay:.1f}s. If it keeps dying, check the topic (deleted?) and"
            " the broker, and report it with this line"
        )
        self.progress.note_error(message)
        self._log.error('store "%s": %s', self._config.name, message)
        self._stop.wait(delay)

    def _child_silence(self, message: str | None) -> None:
        """The Kafka client's process stopped answering (``message``), or answers again (``None``)."""
        if message is None:
            if self._silence is not None and self.progress.last_error == self._silence:
                self.progress.last_error = None
            self._silence = None
            self._log.info('store "%s": the Kafka client process answers again', self._config.name)
            return
        self._silence = message
        self.progress.note_error(message)
        self._warnings.log(
            logging.WARNING, _NUMBERS.sub("#", message), f'store "{self._config.name}": {message}'
        )

    # -- one session --------------------------------------------------------------------------

    def _session(self, writer: TableWriter, backoff: Backoff) -> None:
        """One consumer's life: from validating the stored offsets to a stop or a topology change."""
        config = self._config
        source = self._new_source()
        try:
            info = source.describe(_METADATA_TIMEOUT_SECONDS)
            if info is None:
                raise TransientSourceError(
                    f'topic "{config.topic}" does not exist; waiting for it (create it, or fix'
                    " stores[].topic)"
                )
            stored = self._check_identity(writer, info)
            catch_up, first_offsets = self._sample(source, info, stored)
            self._begin(info, stored, catch_up)
            self._read(source, TopicWatch(source.describe, info), catch_up, first_offsets, backoff)
        finally:
            source.close()

    def _new_source(self) -> RecordSource:
        config, tuning, reporter = self._config, self._tuning.consumer, self._reporter
        if tuning.consumer_in_child_process:
            return ChildConsumerSource(
                config.name,
                config.topic,
                config.kafka,
                reporter.client_error,
                reporter.kafka_log,
                tuning,
                always_metas=config.history is not None,
                on_silence=self._child_silence,
            )
        return ConsumerSource(
            config.name,
            config.topic,
            config.kafka,
            reporter.client_error,
            reporter.kafka_log,
            tuning.poll_max_records,
            tuning.poll_timeout_seconds,
        )

    def _check_identity(self, writer: TableWriter, info: TopicInfo) -> Position:
        """The stored position, once checked against the topic the data came from."""
        stored = writer.position
        stored_topic, stored_id = writer.engine.topic_identity()
        if stored:
            if stored_topic is not None and stored_topic != info.name:
                raise RebuildRequired(
                    f'the store was built from topic "{stored_topic}", now configured "{info.name}"'
                )
            if stored_id is not None and info.topic_id is not None and stored_id != info.topic_id:
                raise RebuildRequired(
                    f'topic "{info.name}" was deleted and recreated'
                    f" (topic id {stored_id} is now {info.topic_id})"
                )
            if max(stored) >= info.partitions:
                raise RebuildRequired(
                    f'topic "{info.name}" has {info.partitions} partitions but the store has offsets for'
                    f" {max(stored) + 1}"
                )
            sharding = self._config.sharding
            foreign = sorted(p for p in stored if not sharding.holds(p))
            if foreign:
                raise RebuildRequired(
                    f"the store holds partitions {foreign}, which are not shard {sharding.shard}'s of"
                    f" {sharding.shards} (it was built with another sharding)"
                )
        unchecked = unchecked_reason(writer.engine, bool(stored), self._config.json_values)
        if unchecked is not None:
            raise RebuildRequired(unchecked)
        wanted = self._config.sharding.natural_layout(self._config.key_codec is not None)
        kept_otherwise = natural_keys_reason(writer.engine, bool(stored), wanted)
        if kept_otherwise is not None:
            raise RebuildRequired(kept_otherwise)
        history_otherwise = writer.natural_history_reason()
        if history_otherwise is not None:
            raise RebuildRequired(history_otherwise)
        if (stored_topic, stored_id) != (info.name, info.topic_id):
            writer.engine.set_topic_identity(info.name, info.topic_id)
        return stored

    def _sample(
        self, source: RecordSource, info: TopicInfo, stored: Position
    ) -> tuple[CatchUp, dict[int, int]]:
        """Each partition's catch-up, its target the end offset sampled now (a lower bound), and
        each partition's first offset; checks that no stored offset fell below a first offset."""
        catch_up = CatchUp()
        first_offsets: dict[int, int] = {}
        self.placement.topic_partitions = info.partitions
        offsets = source.list_offsets(self._config.sharding.own(info.partitions), _METADATA_TIMEOUT_SECONDS)
        for partition, (low, high) in offsets.items():
            if partition in stored and stored[partition] < low:
                raise RebuildRequired(
                    f"partition {partition} starts at offset {low} but the store stopped at"
                    f" {stored[partition]} (retention removed records the store never saw)"
                )
            first_offsets[partition] = low
            catch_up.add(PartitionCatchUp(partition, target=max(high, stored.get(partition, 0))))
        return catch_up, first_offsets

    def _begin(self, info: TopicInfo, stored: Position, catch_up: CatchUp) -> None:
        targets = catch_up.targets()
        self.progress.end_offsets = targets
        state = self._copies.state
        if state is StoreState.READY:
            return
        self.progress.begin_restore(targets)
        sharding = self._config.sharding
        self._log.info(
            'store "%s" restoring topic "%s" (%d partitions%s) from %s towards at least %s',
            self._config.name,
            self._config.topic,
            info.partitions,
            f"; shard {sharding.shard} of {sharding.shards} reads {sharding.own(info.partitions)}"
            if sharding.sharded
            else "",
            stored or "the earliest offsets",
            Position(targets),
        )
        if not targets:
            self._log.warning(
                'store "%s": shard %d of %d holds none of the %d partitions of topic "%s"; use fewer'
                " shards than partitions",
                self._config.name,
                sharding.shard,
                sharding.shards,
                info.partitions,
                self._config.topic,
            )
        if state is StoreState.CREATED:
            self._copies.transition(StoreState.RESTORING)

    def _read(
        self,
        source: RecordSource,
        watch: TopicWatch,
        catch_up: CatchUp,
        first_offsets: dict[int, int],
        backoff: Backoff,
    ) -> None:
        """Read the topic: in bulk first while many records are left, then record by record."""
        after_bulk = False
        while not self._stop.is_set():
            if not after_bulk and self._wants_bulk():
                if not self._bulk_restore(catch_up, first_offsets):
                    return
                after_bulk = True
            position = self._copies.writer.position
            own = self._config.sharding.own(watch.partitions)
            source.assign({p: position.get(p, OFFSET_BEGINNING) for p in own})
            backoff.reset()
            loop = ApplyLoop(
                self._config,
                self._copies,
                source,
                catch_up,
                watch,
                self._reporter,
                self._stop,
                self._wants_bulk,
                after_bulk,
            )
            if not loop.run():
                return

    # -- bulk restores ------------------------------------------------------------------------

    def _wants_bulk(self) -> bool:
        minimum = self._tuning.restore.bulk_load_min_records
        return (
            self._bulk_allowed
            and self._copies.state is not StoreState.READY
            and minimum > 0
            # Restore workers decode values (a copy of the codec each), but write keys as read:
            # keys stored by natural value go through the loop.
            and self._config.key_codec is None
            and self.progress.remaining(self._written_position()) >= minimum
        )

    def _bulk_restore(self, catch_up: CatchUp, first_offsets: dict[int, int]) -> bool:
        """Restore in worker processes once a slot is free; ``False`` on a stop."""
        if not self._wait_for_bulk_slot():
            return False
        try:
            BulkPhase(
                self._config, self._copies.writer, catch_up, first_offsets, self._reporter, self._stop
            ).run()
        finally:
            self._restore_slots.release()
        return not self._stop.is_set()

    def _wait_for_bulk_slot(self) -> bool:
        """Take a bulk restore slot, waiting while other stores hold them all; ``False`` on a stop."""
        slots = self._restore_slots
        if slots.try_acquire():
            return True
        waiting_since = time.monotonic()
        self.progress.restore_mode = RestoreMode.WAITING
        self._log.info(
            'store "%s": %d records to restore; waiting for another store\'s bulk restore to end'
            " (engine.max_concurrent_bulk_restores: %d at once)",
            self._config.name,
            self.progress.remaining(self._written_position()),
            slots.limit,
        )
        try:
            if not slots.acquire(self._stop):
                return False
        finally:
            self.progress.restore_mode = RestoreMode.RECORDS
        self._log.info(
            'store "%s": bulk restore slot free after %.1fs of waiting',
            self._config.name,
            time.monotonic() - waiting_since,
        )
        return True
