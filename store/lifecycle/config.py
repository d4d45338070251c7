"""Configuration of one store: what to materialize, where, and how it is tuned (``store.tuning``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from store.formats import Codec, ValueCodec
from store.lifecycle.sharding import StoreSharding
from store.table.history import HistorySpec
from store.table.indexes import IndexSpec
from store.tuning import StoreTuning


@dataclasses.dataclass(frozen=True, slots=True)
class StoreConfig:
    """One store: a compacted topic materialized into ``state_dir / name``.

    ``kafka`` holds librdkafka settings (``bootstrap.servers``, security settings, ...); they pass
    through as they are, except the few the materializer must own (no consumer group commits,
    no auto topic creation).
    """

    name: str
    topic: str
    kafka: Mapping[str, str] = dataclasses.field(repr=False)  # may hold credentials
    state_dir: Path
    tuning: StoreTuning = dataclasses.field(default_factory=StoreTuning)
    indexes: tuple[IndexSpec, ...] = ()
    history: HistorySpec | None = None
    # The shard of the topic this store materializes (default: every partition), and the
    # producers' partitioner its records are checked against.
    sharding: StoreSharding = dataclasses.field(default_factory=StoreSharding)
    # Decodes every value once, at ingest (``store.formats``); ``None`` stores values as read.
    value_codec: ValueCodec | None = dataclasses.field(default=None, repr=False, compare=False)
    # Every value checked as one JSON document when written (``store.json_values``): a ``json`` store.
    json_values: bool = False
    # Stores every key by its natural value (``store.formats.keys``); ``None`` keeps keys as read.
    key_codec: Codec | None = dataclasses.field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kafka", MappingProxyType(dict(self.kafka)))
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        object.__setattr__(self, "indexes", tuple(self.indexes))
        names = [index.name for index in self.indexes]
        if len(set(names)) != len(names):
            raise ValueError(f'store "{self.name}": index names must be unique, got {names}')

    @property
    def path(self) -> Path:
        """The store's own directory."""
        return self.state_dir / self.name
