"""The engine settings: memory, durability and restore knobs, per store and service-wide."""

from __future__ import annotations

import functools
import logging
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
)

from service.exceptions import ConfigError
from service.memory_limit import auto_block_cache_bytes, memory_limit
from store import StoreTuning

logger = logging.getLogger(__name__)


class EngineSettings(BaseModel):
    """Memory, durability and restore knobs of a store's engine; unset keys keep the level above.

    Sizes take bytes or a unit (``512MiB``, ``1GiB``). Per store and copy: the block cache, up to
    two write buffers per column family in use, and the hot-key read cache; a store being rebuilt
    holds a second copy until the swap.
    """

    model_config = ConfigDict(extra="forbid")

    block_cache_bytes: Annotated[ByteSize, Field(ge=1024 * 1024)] | Literal["auto"] | None = Field(
        default=None,
        description=(
            "RocksDB's cache of uncompressed data blocks, per store; or ``auto``: one cache shared by every"
            " store set to ``auto``, half of the memory limit (the container's, else the machine's)."
        ),
    )
    write_buffer_bytes: ByteSize | None = Field(
        default=None, ge=1024 * 1024, description="One memtable's size; a full one is flushed to an SST file."
    )
    read_cache_entries: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Entries (key and value) of the hot-key cache in front of RocksDB; 0 turns it off. A store"
            " with history also keeps every version of a sixteenth as many hot keys, for reads as of a"
            " time."
        ),
    )
    checkpoint_interval_seconds: float | None = Field(
        default=None,
        gt=0,
        description=(
            "How often a READY store flushes its memtables: at most this much is re-read after a crash."
        ),
    )
    bulk_load_workers: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description=(
            "Processes of a bulk restore (each reads its share of the partitions); about the CPU cores free"
            " for restoring. Each holds a chunk of records (about 60 MiB at 100-byte values) meanwhile."
        ),
    )
    verify_interval_seconds: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Background verification: the pause between passes that read the whole served copy back with "
            "checksums verified (0 turns it off)."
        ),
    )
    verify_bytes_per_second: ByteSize | None = Field(
        default=None, ge=1024, description="The most a verification pass reads per second."
    )
    consumer_in_child_process: bool | None = Field(
        default=None,
        description=(
            "The Kafka client runs in a child process, so that a crash inside it cannot stop the reads; "
            "false runs it in the service's own process."
        ),
    )

    def apply(self, tuning: StoreTuning) -> StoreTuning:
        """``tuning`` with every key set here replacing its value (the keys are ``store.tuning``'s
        field names)."""
        dumped = self.model_dump(include=set(EngineSettings.model_fields))
        changes = {name: value for name, value in dumped.items() if value is not None}
        changes = {name: int(v) if isinstance(v, ByteSize) else v for name, v in changes.items()}
        if "block_cache_bytes" in changes:
            auto = changes["block_cache_bytes"] == "auto"
            if auto:
                try:
                    limit = memory_limit()
                except OSError as exc:
                    if "block_cache_bytes" in self.model_fields_set:
                        raise ConfigError(
                            f"engine.block_cache_bytes is auto, but {exc}; give it a size instead (e.g. 1GiB)"
                        ) from exc
                    # Only the default asked for auto: each store keeps a cache of its own.
                    _warn_no_memory_limit(str(exc), tuning.rocksdb.block_cache_bytes)
                    del changes["block_cache_bytes"]
                    auto = False
                else:
                    changes["block_cache_bytes"] = auto_block_cache_bytes(limit)
            changes["share_block_cache"] = auto
        return tuning.replace(**changes)


@functools.cache
def _warn_no_memory_limit(reason: str, per_store: int) -> None:
    logger.warning(
        "cannot size the shared block cache (engine.block_cache_bytes: auto, the default): %s; each"
        " store gets a cache of %d MiB instead; set engine.block_cache_bytes to a size to choose",
        reason,
        per_store // 2**20,
    )


class ServiceEngineSettings(EngineSettings):
    """The top-level ``engine`` section: every store's knobs, and the service-wide ones."""

    block_cache_bytes: Annotated[ByteSize, Field(ge=1024 * 1024)] | Literal["auto"] | None = Field(
        default="auto",
        description="One block cache shared by the stores, half of the memory limit, unless set (see above).",
    )
    max_concurrent_bulk_restores: int = Field(
        default=1,
        ge=1,
        le=16,
        description=(
            "Bulk restores running at once across the stores; the others restore record by record until a "
            "slot is free. Each takes about two cores and a few hundred MiB while it runs."
        ),
    )
