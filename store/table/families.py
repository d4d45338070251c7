"""The column families of a store's database, and whose keys each holds.

============  ===============================================================================
family        keys, and the module that owns their layout
============  ===============================================================================
``default``   the table: row key → latest value (``store.table.engine``)
``meta``      small keys of several owners, each under its own prefix: ``offset/``, ``topic``,
              ``topic_id``, ``format_version``, ``values_checked``, ``natural_keys`` (``store.table.engine``);
              ``index/`` (``store.table.indexes``); ``history_start/``, ``history_time/``
              (``store.table.history``); ``history_layout`` (``store.table.history_layout``);
              ``history_pretime/``, ``history_time_floor`` (``store.table.timed``); ``natural/``
              (``store.table.winners``: a natural key's record per key schema id)
``index``     secondary index entries (``store.table.indexes``)
``history``   versions of rows, for reads as of a position (``store.table.history_keys``)
``changes``   the change log driving history pruning and ``as_of`` index reads (``store.table.history_keys``)
============  ===============================================================================

The engine (``store.table.engine``) opens them all and gives generic access to each by name; the
owners encode and decode their own keys.
"""

from __future__ import annotations

DEFAULT = "default"
META = "meta"
INDEX = "index"
HISTORY = "history"
CHANGES = "changes"
ALL = (DEFAULT, META, INDEX, HISTORY, CHANGES)
