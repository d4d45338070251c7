"""The column families of a store's database, and whose keys each holds.

============  ===============================================================================
family        keys, and the module that owns their layout
============  ===============================================================================
``default``   the table: row key → latest value (``store.engine``)
``meta``      small keys of several owners, each under its own prefix: ``offset/``, ``topic``,
              ``topic_id``, ``format_version`` (``store.engine``); ``index/`` (``store.indexes``);
              ``history_start/``, ``history_time/`` (``store.history``)
``index``     secondary index entries (``store.indexes``)
``history``   versions of rows, for reads as of a position (``store.history``)
``changes``   the change log that drives history pruning and ``as_of`` index reads (``store.history``)
============  ===============================================================================

The engine (``store.engine``) opens them all and gives generic access to each by name; the
owners encode and decode their own keys.
"""

from __future__ import annotations

DEFAULT = "default"
META = "meta"
INDEX = "index"
HISTORY = "history"
CHANGES = "changes"
ALL = (DEFAULT, META, INDEX, HISTORY, CHANGES)
