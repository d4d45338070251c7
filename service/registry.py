"""The stores one service instance serves, with what the HTTP layer needs to know about each."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from service.codec import VALUE_MEDIA_TYPES
from service.settings import Settings
from service.store_settings import (
    DECODED_FORMATS,
    REGISTRY_FORMATS,
    HistorySettings,
    key_schemas_dir,
    schemas_dir,
)
from service.typed_values import LatestValueType
from store import ServableStore, StoreState, StoreStatus
from store.formats.keys import stored_natural_format

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class ServedStore:
    """One store as served: the store itself and how its values are presented."""

    name: str
    topic: str
    value_format: str
    media_type: str
    store: ServableStore
    history: HistorySettings | None = None  # the configured retention, when the store keeps history
    partitioner: str = "murmur2"  # how the topic's producers placed keys (clients.partitioners)
    key_format: str = "bytes"  # how the producers wrote keys (service.natural_keys)
    # The configured value format when it is decoded at ingest into JSON (``avro``...): the store
    # then serves as a ``json`` store (``value_format``), and says this name.
    format_name: str | None = None
    schemas_dir: Path | None = None  # where such a store keeps the schemas it decodes with
    # For keys written through the Schema Registry (``avro``...): the natural key format they are stored in.
    natural_keys: NaturalKeyFormat | None = None
    # For values decoded at ingest: the Arrow struct of the latest schema (service.typed_values).
    value_type: LatestValueType | None = None

    @property
    def keys_as(self) -> str:
        """The key format requests and answers use: ``key_format``, or for keys written through
        the Schema Registry the natural format they are stored in (``long``, ``int``, ``string``)."""
        if self.natural_keys is None:
            return self.key_format
        return self.natural_keys() or "string"

    @property
    def reported_key_format(self) -> str:
        """``key_format`` as ``StoreInfo`` says it: ``keys_as``, or for keys written through the
        Schema Registry with no natural format yet (none decoded) the configured format, which
        tells clients to ask again."""
        if self.natural_keys is None:
            return self.key_format
        return self.natural_keys() or self.key_format


class NaturalKeyFormat:
    """The natural key format a store keeps registry-framed keys in, as its ingest last decided it.

    Ingest writes it into the store's key schemas directory when it decodes the first key (and when
    a new latest key schema changes it, which rebuilds the store); read at most once a second.
    ``None`` until a key was decoded.
    """

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        self._known: tuple[float, str] = (-1.0, "string")

    def __call__(self) -> str | None:
        now = time.monotonic()
        read_at, known = self._known
        if now - read_at < 1.0:
            return known
        stored = stored_natural_format(self._directory)
        if stored is None:
            return None  # asked again next time: the first key decoded writes it
        with self._lock:
            self._known = (now, stored)
        return stored


class StoreRegistry:
    """The served stores by name, and the errors met while starting them."""

    def __init__(self, settings: Settings, stores: Mapping[str, ServableStore]) -> None:
        self.sharding = settings.sharding
        self._served: dict[str, ServedStore] = {}
        for name, store in stores.items():
            configured = settings.store(name)
            configured_format = configured.value_format if configured else "bytes"
            value_format = "json" if configured_format in DECODED_FORMATS else configured_format
            self._served[name] = ServedStore(
                name=name,
                topic=configured.topic if configured else name,
                value_format=value_format,
                media_type=VALUE_MEDIA_TYPES[value_format],
                store=store,
                history=configured.history if configured else None,
                partitioner=configured.partitioner if configured else "murmur2",
                key_format=configured.key_format if configured else "bytes",
                format_name=configured_format if configured_format != value_format else None,
                schemas_dir=schemas_dir(settings.state_dir, name)
                if configured_format != value_format
                else None,
                value_type=LatestValueType(configured_format, schemas_dir(settings.state_dir, name))
                if configured_format != value_format
                else None,
                natural_keys=NaturalKeyFormat(key_schemas_dir(settings.state_dir, name))
                if configured is not None and configured.key_format in REGISTRY_FORMATS
                else None,
            )
        self._start_errors: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> ServedStore | None:
        return self._served.get(name)

    def names(self) -> list[str]:
        return list(self._served)

    def all(self) -> list[ServedStore]:
        return list(self._served.values())

    def record_start_error(self, name: str, message: str) -> None:
        with self._lock:
            self._start_errors[name] = message

    def start_error(self, name: str) -> str | None:
        with self._lock:
            return self._start_errors.get(name)

    def state_of(self, served: ServedStore) -> StoreState:
        """The store's state; a store that failed to start is FAILED, one not yet started CREATED."""
        if self.start_error(served.name) is not None:
            return StoreState.FAILED
        try:
            return served.store.state
        except Exception:  # a store that is still being constructed may not know its state yet
            return StoreState.CREATED

    def readable(self, served: ServedStore) -> bool:
        """Whether reads of the store get answers now (READY, or rebuilding from a last good copy)."""
        # Asked on every read: one lookup, atomic without the lock (the lock orders the writers).
        if self._start_errors.get(served.name) is not None:
            return False
        try:
            return served.store.readable
        except Exception:  # a store that is still being constructed cannot be read
            return False

    def status_of(self, served: ServedStore) -> StoreStatus | None:
        """The store's status, or ``None`` while it cannot give one (not started yet)."""
        try:
            return served.store.status()
        except Exception as exc:  # status must never fail a probe or a scrape
            logger.debug("store %s gave no status: %s", served.name, exc)
            return None
