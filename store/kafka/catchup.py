"""How far each partition is read against the high watermarks that fetch responses report."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class PartitionCatchUp:
    """One partition's catch-up: how far it is read, the high watermark of its last fetch
    response, and whether it is caught up.

    It is caught up once its end of partition was reported, or once it is read up to a high
    watermark (that event comes only with the answer to a further fetch, which the broker holds
    for up to ``fetch.wait.max.ms`` since it has nothing to return). ``target`` is what a restore
    must reach at least: the end offset sampled before reading, a lower bound since some brokers
    answer ListOffsets too low, raised once to the first high watermark a fetch reports.
    """

    __slots__ = ("caught_up", "high_watermark", "next_offset", "partition", "refined", "target")

    def __init__(self, partition: int, next_offset: int | None = None, target: int = 0) -> None:
        self.partition = partition
        self.next_offset = next_offset  # after the last record read (None: not known yet)
        self.target = target
        self.high_watermark: int | None = None
        self.refined = False  # whether a fetch response has set the target
        self.caught_up = False

    def saw_high_watermark(self, high: int) -> bool:
        """Take the high watermark of a fetch response; ``True`` if it raised the target."""
        self.high_watermark = high
        raised = False
        if not self.refined:
            self.refined = True
            raised = high > self.target
            self.target = max(self.target, high)
        if self.next_offset is not None and self.next_offset >= high:
            self.caught_up = True
        return raised

    @property
    def unread(self) -> int:
        """Records between the next offset and the last high watermark (0 while either is unknown)."""
        if self.next_offset is None or self.high_watermark is None:
            return 0
        return max(0, self.high_watermark - self.next_offset)


class CatchUp:
    """Every partition's catch-up, driven by what each poll read and reported."""

    def __init__(self, partitions: Iterable[PartitionCatchUp] = ()) -> None:
        self.partitions = {catch_up.partition: catch_up for catch_up in partitions}

    def add(self, catch_up: PartitionCatchUp) -> None:
        self.partitions[catch_up.partition] = catch_up

    def read(self, next_offsets: Mapping[int, int]) -> None:
        """Records were read up to ``next_offsets``."""
        partitions = self.partitions
        for partition, next_offset in next_offsets.items():
            if partition in partitions:
                partitions[partition].next_offset = next_offset

    def ended(self, partitions: Iterable[int]) -> None:
        """These partitions reported their end (or a worker read them to it)."""
        for partition in partitions:
            if partition in self.partitions:
                self.partitions[partition].caught_up = True

    def saw_high_watermarks(self, highs: Mapping[int, int]) -> bool:
        """Take the high watermarks of the last fetch responses; ``True`` if a target was raised."""
        raised = False
        for partition, high in highs.items():
            catch_up = self.partitions.get(partition)
            if catch_up is not None:
                raised = catch_up.saw_high_watermark(high) or raised
        return raised

    @property
    def done(self) -> bool:
        """Every partition is caught up."""
        return all(catch_up.caught_up for catch_up in self.partitions.values())

    @property
    def refined(self) -> bool:
        """Every partition's target comes from a fetch response, not only from ListOffsets."""
        return all(catch_up.refined for catch_up in self.partitions.values())

    @property
    def unread(self) -> int:
        return sum(catch_up.unread for catch_up in self.partitions.values())

    def next_offsets(self) -> dict[int, int]:
        """The next offset per partition, where known."""
        return {
            partition: catch_up.next_offset
            for partition, catch_up in self.partitions.items()
            if catch_up.next_offset is not None
        }

    def targets(self) -> dict[int, int]:
        return {partition: catch_up.target for partition, catch_up in self.partitions.items()}

    def high_watermarks(self) -> dict[int, int]:
        """The latest high watermark known per partition (partitions without one are left out)."""
        return {
            partition: catch_up.high_watermark
            for partition, catch_up in self.partitions.items()
            if catch_up.high_watermark is not None
        }
