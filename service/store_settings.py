"""The settings of one store: its topic, formats, indexes, history and sharding, and the Schema
Registry the registry formats read from."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from clients.partitioners import PartitionerName
from service.engine_settings import EngineSettings
from store import HistorySpec, IndexSpec

_STORE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


ValueFormat = Literal["bytes", "string", "json", "avro", "protobuf", "json_schema"]
KeyFormat = Literal["bytes", "string", "long", "int", "avro", "protobuf", "json_schema"]
# Formats whose records are framed with a Schema Registry schema id (Confluent's serializers).
REGISTRY_FORMATS = frozenset({"avro", "protobuf", "json_schema"})
# Value formats decoded at ingest into JSON documents (store.formats): served as ``json`` stores.
DECODED_FORMATS = frozenset({"avro", "json_schema", "protobuf"})


class SchemaRegistrySettings(BaseModel):
    """The Confluent Schema Registry that ``avro``, ``protobuf`` and ``json_schema`` stores read
    their schemas from (its REST API; any compatible server)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://", description="the registry's base URL, http:// or https://")
    basic_auth_user_info: SecretStr | None = Field(
        default=None, description="`USER:PASSWORD` for HTTP basic authentication (a secret)"
    )
    ca_file: Path | None = Field(
        default=None, description="the CA bundle that verifies the registry's certificate"
    )
    certfile: Path | None = Field(default=None, description="a client certificate for the registry")
    keyfile: Path | None = Field(default=None, description="the client certificate's key")

    @model_validator(mode="after")
    def _pairs(self) -> SchemaRegistrySettings:
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("schema_registry.certfile and schema_registry.keyfile go together: set both")
        return self

    def client_config(self) -> dict[str, str]:
        """The settings as confluent-kafka's ``SchemaRegistryClient`` takes them (secret revealed)."""
        config = {"url": self.url}
        if self.basic_auth_user_info is not None:
            config["basic.auth.user.info"] = self.basic_auth_user_info.get_secret_value()
        if self.ca_file is not None:
            config["ssl.ca.location"] = str(self.ca_file)
        if self.certfile is not None and self.keyfile is not None:
            config["ssl.certificate.location"] = str(self.certfile)
            config["ssl.key.location"] = str(self.keyfile)
        return config


class IndexSettings(BaseModel):
    """A secondary index named ``name`` over the dotted ``field`` path of a JSON store's values."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the index's name in the URL (`/indexes/{name}/...`)")
    field: str = Field(description="dotted path into the JSON value (e.g. `ticker`, `owner.id`)")

    def spec(self) -> IndexSpec:
        return IndexSpec(name=self.name, field=self.field)


class HistorySettings(BaseModel):
    """Older versions of values kept for reads as of a position: by age, by offsets, or both."""

    model_config = ConfigDict(extra="forbid")

    retention_ms: int | None = Field(
        default=None, ge=1, description="keep older versions this many milliseconds (by record timestamp)"
    )
    retention_offsets: int | None = Field(
        default=None, ge=1, description="keep older versions for this many offsets per partition"
    )

    def spec(self) -> HistorySpec:
        return HistorySpec(retention_ms=self.retention_ms, retention_offsets=self.retention_offsets)


class ShardingSettings(BaseModel):
    """Which partitions this process serves: partition ``p`` belongs to shard ``p % shards``.

    One shard (the default) serves every partition; the chart tells each pod its shard.
    """

    model_config = ConfigDict(extra="forbid")

    shards: int = Field(
        default=1, ge=1, le=1000, description="number of shards; partition p belongs to shard p % shards"
    )
    shard: int = Field(
        default=0,
        ge=0,
        description="this process's shard, 0 to shards - 1 (the chart derives it from the pod)",
    )

    @model_validator(mode="after")
    def _shard_exists(self) -> ShardingSettings:
        if self.shard >= self.shards:
            raise ValueError(
                f"sharding.shard is {self.shard} but there are {self.shards} shard(s), numbered 0 to"
                f" {self.shards - 1}: set sharding.shard (STATESTORE_SHARDING__SHARD) to one of them"
            )
        return self


class StoreSettings(BaseModel):
    """One store: a compacted topic served under ``name``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the store's name in URLs and metrics; also its directory name")
    topic: str = Field(min_length=1, description="the compacted topic the store materializes")
    value_format: ValueFormat = Field(
        default="bytes",
        description=(
            "how values are written and answered: `bytes` (base64 in JSON), `string` (UTF-8 text), `json`, "
            "or decoded once at ingest through the Schema Registry: `avro`, `protobuf`, `json_schema`"
        ),
    )
    key_format: KeyFormat = Field(
        default="bytes",
        description=(
            "how keys are written (Kafka's serializers: `long` = LongSerializer, `int` = IntegerSerializer, "
            "`string` = StringSerializer; `avro`, `protobuf`, `json_schema` = Confluent's serializers via "
            "the Schema Registry, stored by their natural value, the latest write across key schema ids "
            "answering; sharded, each shard reads every partition and keeps the natural keys that hash to "
            "it); reads take and answer them by value"
        ),
    )
    partitioner: PartitionerName = Field(
        default="murmur2",
        description=(
            "How the topic's producers chose a record's partition from its key (clients.partitioners): a "
            "sharded store routes keys by it and counts records it would not find."
        ),
    )
    indexes: list[IndexSettings] = Field(
        default_factory=list,
        description="secondary indexes over fields of the JSON values (needs `value_format: json`)",
    )
    history: HistorySettings | None = Field(
        default=None,
        description="keep older versions for reads `as_of` a position (absent: latest values only)",
    )
    engine: EngineSettings = Field(
        default_factory=EngineSettings,
        description="Overrides of the top-level ``engine`` section for this store alone.",
    )

    @field_validator("name")
    @classmethod
    def _sane_name(cls, name: str) -> str:
        if not _STORE_NAME.match(name) or name in {".", ".."}:
            raise ValueError(
                f"store name {name!r} is not usable: it becomes a directory name, so use 1-100 letters,"
                " digits, '.', '_' or '-', starting with a letter or digit"
            )
        return name

    @model_validator(mode="after")
    def _engine_accepts(self) -> StoreSettings:
        # The engine's own checks (index names and fields, history retention), surfaced as settings errors.
        for index in self.indexes:
            index.spec()
        if self.history is not None:
            self.history.spec()
        names = [index.name for index in self.indexes]
        if len(set(names)) != len(names):
            raise ValueError(f"index names must be unique within store {self.name!r}")
        if self.indexes and self.value_format != "json" and self.value_format not in DECODED_FORMATS:
            raise ValueError(
                f"store {self.name!r} has indexes, which need value_format: json (or a format decoded"
                " at ingest: avro)"
            )
        return self


def key_schemas_dir(state_dir: Path, store: str) -> Path:
    """Where a store keeping keys by their natural value keeps the key schemas it fetched."""
    return state_dir / f"{store}.key-schemas"


def schemas_dir(state_dir: Path, store: str) -> Path:
    """Where a store decoding values at ingest keeps the schemas it fetched."""
    return state_dir / f"{store}.schemas"
