"""The Kafka side of a store: reading its changelog topic, in child processes.

Its public face: the record sources the materializer polls (:class:`RecordSource`; the Kafka client
in a child process, :class:`ChildConsumerSource`, or in this one, :class:`ConsumerSource`), what a
poll brings (:class:`Poll`, :class:`RecordBatch`, :class:`KafkaErrorReport`), each partition's
catch-up (:class:`CatchUp`), the consumer settings a store uses (:func:`consumer_config`), and the
errors that end a session (:class:`RebuildRequired`, :class:`TransientSourceError`). The child
processes themselves are ``store.kafka.consumer_process`` and ``store.kafka.restore_worker`` (the
bulk restore's workers, which write SST files in the table's format, ``store.table_format``).
Nothing here imports the table (``store.table``) or the lifecycle.
"""

from store.kafka.batch import KafkaErrorReport, RecordBatch
from store.kafka.catchup import CatchUp, PartitionCatchUp
from store.kafka.child_source import ChildConsumerSource
from store.kafka.client import RebuildRequired, TransientSourceError, consumer_config
from store.kafka.polls import Poll
from store.kafka.source import ConsumerSource, RecordSource

__all__ = [
    "CatchUp",
    "ChildConsumerSource",
    "ConsumerSource",
    "KafkaErrorReport",
    "PartitionCatchUp",
    "Poll",
    "RebuildRequired",
    "RecordBatch",
    "RecordSource",
    "TransientSourceError",
    "consumer_config",
]
