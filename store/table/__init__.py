"""The RocksDB table of a store: one copy of it, read and written.

Its public face: :class:`Replica` (a copy: its database, position, indexes, history and hot-key
cache), what it takes from the rest of the store (:class:`TableConfig`, :class:`Changes`), the specs
of its indexes and history (:class:`IndexSpec`, :class:`HistorySpec`), and the background check of
a copy (:class:`Verifier`). Below it: ``engine`` (RocksDB itself), ``indexes``, ``history``,
``asof``, ``hot_keys``, ``corruption``, ``families``. Nothing here imports the Kafka side
(``store.kafka``) or the lifecycle.
"""

from store.table.history import HistorySpec
from store.table.indexes import IndexSpec
from store.table.replica import Replica
from store.table.seams import Changes, TableConfig
from store.table.verifier import Verifier, VerifyStep

__all__ = ["Changes", "HistorySpec", "IndexSpec", "Replica", "TableConfig", "Verifier", "VerifyStep"]
