"""A store's lifecycle, on top of its Kafka side (``store.kafka``) and its table (``store.table``).

Its public face: :class:`Store` (open, restore, serve, close), its configuration
(:class:`StoreConfig`, :class:`StoreSharding`), the slots that bound concurrent bulk restores
(:class:`RestoreSlots`), the garbage collector's pacing while restoring (:func:`fewer_collections`)
and the in-memory stand-in with the same protocol (:class:`InMemoryStore`).
Below it: ``copies`` (which copy serves), ``materializer`` (the writer thread's sessions),
``apply_loop`` and ``bulkload`` (its two ways of restoring), ``writer`` (the seam it writes
through), ``write_errors``, ``progress``, ``reporter``, ``timing``.
"""

from store.lifecycle.config import StoreConfig
from store.lifecycle.gc_pacing import fewer_collections
from store.lifecycle.memory import InMemoryStore
from store.lifecycle.restore_slots import RestoreSlots
from store.lifecycle.sharding import StoreSharding
from store.lifecycle.store import Store

__all__ = ["InMemoryStore", "RestoreSlots", "Store", "StoreConfig", "StoreSharding", "fewer_collections"]
