"""The service's configuration: one YAML file, every key overridable by ``STATESTORE_…`` variables.

Nested keys are joined by ``__`` (``STATESTORE_HTTP__PORT=9000``); the environment wins over the
file. Lists and mappings can also be given as JSON (``STATESTORE_STORES='[{"name": ...}]'``).
Kafka settings pass through to librdkafka; values whose key looks secret (``sasl.password``,
``ssl.key.password``, ...) are held as ``SecretStr`` and never logged or shown.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from clients.partitioners import PartitionerName, place
from service.exceptions import ConfigError
from service.memory_limit import auto_block_cache_bytes, memory_limit
from store import MAX_SCAN_LIMIT, HistorySpec, IndexSpec, StoreConfig, StoreSharding, StoreTuning
from store.formats import ValueCodec
from store.formats.avro import AvroValues
from store.formats.json_schema import JsonSchemaValues
from store.formats.keys import RegistryKeys
from store.formats.protobuf import ProtobufValues
from store.formats.schemas import SchemaSource

logger = logging.getLogger(__name__)

ENV_PREFIX = "STATESTORE_"

_STORE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_SECRET_MARKERS = ("password", "secret", "token", "ssl.key.pem", "private")

ValueFormat = Literal["bytes", "string", "json", "avro", "protobuf", "json_schema"]
KeyFormat = Literal["bytes", "string", "long", "int", "avro", "protobuf", "json_schema"]
# Formats whose records are framed with a Schema Registry schema id (Confluent's serializers).
REGISTRY_FORMATS = frozenset({"avro", "protobuf", "json_schema"})
# Accepted by the contract, not served yet: refused at start rather than served as opaque bytes.
UNSUPPORTED_VALUE_FORMATS: frozenset[str] = frozenset()
# Value formats decoded at ingest into JSON documents (store.formats): served as ``json`` stores.
DECODED_FORMATS = frozenset({"avro", "json_schema", "protobuf"})
UNSUPPORTED_KEY_FORMATS: frozenset[str] = frozenset()


def _librdkafka_key(key: str) -> str:
    """``bootstrap_servers`` → ``bootstrap.servers``; dotted keys pass through as they are.

    Environment variable names cannot hold dots, so a key without dots is read as dots written
    as underscores (librdkafka property names are dotted).
    """
    key = key.strip()
    return key if "." in key else key.lower().replace("_", ".")


def _is_secret(key: str) -> bool:
    return any(marker in key.lower() for marker in _SECRET_MARKERS)


def _default_kafka() -> dict[str, str | SecretStr]:
    return {"bootstrap.servers": "127.0.0.1:9092"}


class TlsSettings(BaseModel):
    """TLS for the HTTP listener: a PEM certificate chain and its private key; with ``client_ca``
    (a PEM bundle of CA certificates) clients may present certificates, verified against it.

    A client without a certificate still connects (and needs a token); a certificate the bundle
    does not vouch for is refused in the handshake. The files are read again when they change.
    """

    model_config = ConfigDict(extra="forbid")

    certfile: Path = Field(description="PEM file with the server certificate chain")
    keyfile: Path = Field(description="PEM file with the certificate's private key")
    client_ca: Path | None = Field(
        default=None,
        description=(
            "PEM bundle of the CAs whose client certificates are asked for and verified (mTLS; a client "
            "without a certificate may still use a token)"
        ),
    )
    reload_interval_seconds: float = Field(
        default=10.0,
        gt=0,
        description="how often the files are checked for changes (new connections use a rotated certificate)",
    )


class HttpSettings(BaseModel):
    """Where the HTTP service listens."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(default="127.0.0.1", description="address to listen on (0.0.0.0 for every interface)")
    port: int = Field(default=8080, ge=0, le=65535, description="port to listen on")
    tls: TlsSettings | None = Field(
        default=None, description="serve HTTPS with this certificate and key (absent: plain HTTP)"
    )
    forwarded_allow_ips: list[str] = Field(
        default_factory=list,
        description=(
            "Addresses (or networks, e.g. 10.0.0.0/8) of proxies whose X-Forwarded-For and "
            "X-Forwarded-Proto headers are believed: the client address then comes from them (limits, "
            "the access log). None by default: a header any client can send says nothing about who it is."
        ),
    )


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
        description="Entries (key and value) of the hot-key cache in front of RocksDB; 0 turns it off.",
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
            "the Schema Registry, stored by their natural value); reads take and answer them by value"
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


class LimitSettings(BaseModel):
    """Bounds on what one request may ask, so no request can exhaust the service."""

    model_config = ConfigDict(extra="forbid")

    max_batch_keys: int = Field(
        default=10_000,
        ge=1,
        description="keys (or index values) one batch request may ask; more get 413 batch-too-large",
    )
    max_scan_limit: int = Field(
        default=MAX_SCAN_LIMIT,
        ge=1,
        le=MAX_SCAN_LIMIT,
        description="the largest page a scan or index lookup may ask; more get 413 page-too-large",
    )
    max_key_bytes: int = Field(
        default=4096,
        ge=1,
        description="bytes of a key, prefix, cursor or indexed value; more get 413 key-too-large",
    )
    max_body_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1, description="bytes of a request body; more get 413 body-too-large"
    )
    max_answer_bytes: ByteSize = Field(
        default=ByteSize(64 * 1024 * 1024),
        ge=1,
        description=(
            "Bytes of stored values one answer may carry (batch get, scan, index reads; a key asked twice "
            "counts twice); more get 413 answer-too-large, refused before the answer is built."
        ),
    )
    max_answer_rows: int = Field(
        default=100_000,
        ge=1,
        description=(
            "Rows one index batch answer may hold (every value's matches, one row for a value without); "
            "more get 413 answer-too-large, so a small request cannot ask for a huge answer."
        ),
    )
    min_position_timeout_seconds: float = Field(
        default=5.0,
        ge=0,
        description=(
            "the longest a read waits for `min_position` or `as_of` (a request's `timeout_ms` may ask less)"
        ),
    )
    max_position_waiters: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Accepted so that configurations setting it still load, and ignored (a warning says so): a "
            "position wait holds no thread, and max_concurrent_requests_per_client bounds one client's."
        ),
    )
    max_concurrent_requests: int = Field(
        default=1024, ge=1, description="Store requests served at once; more get 429 too-many-requests."
    )
    max_concurrent_requests_per_client: int = Field(
        default=256,
        ge=1,
        description=(
            "Store requests served at once for one client (a bearer token, else an address); more get 429 "
            "client-too-many-requests, so one greedy client cannot take every slot."
        ),
    )
    request_timeout_ms: int = Field(
        default=30_000,
        ge=1,
        description=(
            "A store request running longer (e.g. waiting for min_position) gets 503 request-timeout."
        ),
    )
    request_head_timeout_ms: int = Field(
        default=10_000,
        ge=1,
        description=(
            "A connection whose request head (request line and headers) is not complete this long after it "
            "opened, or after the request's first byte, is closed."
        ),
    )
    max_request_head_bytes: ByteSize = Field(
        default=ByteSize(64 * 1024),
        ge=1024,
        description=(
            "Bytes of one request head (request line and headers, as sent); a longer one gets 431 "
            "request-head-too-large as soon as it passes the bound, before anything else is checked."
        ),
    )
    max_url_bytes: ByteSize = Field(
        default=ByteSize(32 * 1024),
        ge=256,
        description=(
            "Bytes of one request's target (path and query string, as sent); a longer one gets 414 "
            "uri-too-long."
        ),
    )
    idle_connection_timeout_ms: int = Field(
        default=5_000,
        ge=1,
        description="A keep-alive connection with no request in progress is closed after this long.",
    )
    max_connections_per_client: int = Field(
        default=256,
        ge=1,
        description=(
            "Connections open at once from one address; more are answered 503 client-too-many-connections "
            "(with Retry-After) and closed as soon as they open. One client "
            "cannot use more than its share of requests anyway (max_concurrent_requests_per_client); behind"
            " a proxy that hides the clients' addresses, raise it."
        ),
    )
    retry_after_seconds: int = Field(
        default=1,
        ge=1,
        description="Seconds a client is told to wait (Retry-After) when a store is not ready or behind.",
    )


class LoggingSettings(BaseModel):
    """How the service logs: ``text`` lines or one ``json`` object per line, and the access log."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["text", "json"] = Field(
        default="text", description="`text` lines or one `json` object per line"
    )
    access_log: bool = Field(
        default=False,
        description="One line per HTTP request (method, path, code, duration, client); off by default.",
    )


ALL_STORES = "*"


class TokenSettings(BaseModel):
    """One bearer token, stored as the hex SHA-256 of the token, and the stores it may read.

    ``stores`` lists store names, or is ``["*"]`` for every store, present and future. Reading
    everything must be asked for: a token with no ``stores`` is a configuration error, not a
    token that reads everything by omission.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1, description="a name for the token, shown in logs and metrics (never the token)"
    )
    sha256: str = Field(
        pattern=r"^[0-9a-fA-F]{64}$",
        description="hex SHA-256 of the bearer token (the token itself is never configured)",
    )
    stores: list[str] = Field(description='the stores the token may read, or `["*"]` for every store')

    @field_validator("sha256")
    @classmethod
    def _lower(cls, digest: str) -> str:
        return digest.lower()

    @model_validator(mode="after")
    def _explicit_stores(self) -> TokenSettings:
        if not self.stores:
            raise ValueError(
                f"auth token {self.name!r} names no stores: list the stores it may read,"
                f' or stores: ["{ALL_STORES}"] for every store'
            )
        if ALL_STORES in self.stores and len(self.stores) > 1:
            raise ValueError(
                f'auth token {self.name!r} lists "{ALL_STORES}" with other stores:'
                f' use ["{ALL_STORES}"] alone for every store, or only names'
            )
        return self

    @property
    def reads_every_store(self) -> bool:
        return self.stores == [ALL_STORES]


class CertificateSettings(BaseModel):
    """Clients presenting a verified certificate (see ``http.tls.client_ca``) named ``common_name``,
    as its subject's CN or one of its DNS subject alternative names, and the stores they may read
    (as a token's ``stores``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="who the certificate is, in logs and the access log")
    common_name: str = Field(
        min_length=1, description="the verified certificate's subject CN or one of its DNS names"
    )
    stores: list[str] = Field(description='the stores it may read, or ["*"] for every store')

    @model_validator(mode="after")
    def _explicit_stores(self) -> CertificateSettings:
        _check_stores(f"auth certificate {self.name!r}", self.stores)
        return self

    @property
    def reads_every_store(self) -> bool:
        return self.stores == [ALL_STORES]


def _check_stores(what: str, stores: list[str]) -> None:
    if not stores:
        raise ValueError(
            f"{what} names no stores: list the stores it may read,"
            f' or stores: ["{ALL_STORES}"] for every store'
        )
    if ALL_STORES in stores and len(stores) > 1:
        raise ValueError(
            f'{what} lists "{ALL_STORES}" with other stores: use ["{ALL_STORES}"] alone for every store,'
            " or only names"
        )


class AuthSettings(BaseModel):
    """``open`` serves everyone (local development only); ``tokens`` requires a bearer token or a
    client certificate named in ``certificates``."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["open", "tokens"] = Field(
        default="open",
        description=(
            "`open` serves everyone (local development only); `tokens` requires a bearer token or a client "
            "certificate"
        ),
    )
    tokens: list[TokenSettings] = Field(
        default_factory=list,
        description="the bearer tokens and the stores each may read (with `mode: tokens`)",
    )
    tokens_file: Path | None = Field(
        default=None,
        description="a YAML (or JSON) file of more tokens, shaped as `tokens`; read again when it changes",
    )
    reload_interval_seconds: float = Field(
        default=10.0, gt=0, description="how often `tokens_file` is checked for changes"
    )
    certificates: list[CertificateSettings] = Field(
        default_factory=list,
        description="verified client certificates (by subject CN or DNS name) and the stores each may read",
    )
    metrics: Literal["open", "token"] = Field(
        default="open",
        description=(
            "``token``: /metrics needs a bearer token too (any configured one); probes always stay open."
        ),
    )

    @model_validator(mode="after")
    def _tokens_when_needed(self) -> AuthSettings:
        if self.mode == "tokens" and not (self.tokens or self.tokens_file or self.certificates):
            raise ValueError(
                "auth.mode is 'tokens' but auth.tokens, auth.tokens_file and auth.certificates are empty:"
                " list at least one token or certificate"
            )
        names = [c.common_name for c in self.certificates]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(
                f"auth.certificates: common_name {', '.join(map(repr, repeated))} is listed more than once;"
                " one name must mean one set of stores"
            )
        if self.metrics == "token" and self.mode != "tokens":
            raise ValueError("auth.metrics is 'token' but auth.mode is 'open': set auth.mode to 'tokens'")
        _refuse_ambiguous_tokens(self.tokens)
        return self


def _refuse_ambiguous_tokens(tokens: list[TokenSettings]) -> None:
    """Refuse two entries for one token (same digest) or one name for two tokens.

    Either would make one credential mean two things: a token would get the stores of whichever
    entry is looked up, and a name in the logs and metrics would stand for two clients.
    """
    for field, what, advice in (
        ("sha256", "the same sha256 (one token)", "give each entry a token of its own, or merge them"),
        ("name", "the same name", "give each token a name of its own"),
    ):
        first: dict[str, int] = {}
        for position, token in enumerate(tokens):
            value = getattr(token, field)
            if value in first:
                earlier = first[value]
                raise ValueError(
                    f"auth.tokens[{earlier}] ({tokens[earlier].name!r}) and auth.tokens[{position}]"
                    f" ({token.name!r}) have {what}, so one credential would mean two things: {advice}"
                )
            first[value] = position


class Settings(BaseSettings):
    """The whole service configuration (see design.md, "Public contracts")."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", case_sensitive=False
    )

    kafka: dict[str, str | SecretStr] = Field(
        default_factory=_default_kafka,
        description=(
            "librdkafka settings for the consumers, passed through as they are (`bootstrap_servers` or "
            "`bootstrap.servers`, `security.protocol`, `sasl.*`, `ssl.*`, ...); keys that look secret are "
            "held as secrets"
        ),
    )
    state_dir: Path = Field(
        default=Path("./state"),
        description="where the stores keep their RocksDB files, one directory per store; one process's alone",
    )
    http: HttpSettings = Field(default_factory=HttpSettings, description="where the HTTP service listens")
    stores: list[StoreSettings] = Field(
        default_factory=list, description="the stores to serve, one per compacted topic"
    )
    schema_registry: SchemaRegistrySettings | None = Field(
        default=None,
        description=(
            "the Confluent Schema Registry that `avro`, `protobuf` and `json_schema` stores read schemas from"
        ),
    )
    limits: LimitSettings = Field(
        default_factory=LimitSettings, description="bounds on what one request may ask"
    )
    auth: AuthSettings = Field(default_factory=AuthSettings, description="who may read what")
    engine: ServiceEngineSettings = Field(
        default_factory=ServiceEngineSettings,
        description="Engine knobs for every store; a store's own ``engine`` section overrides them.",
    )
    sharding: ShardingSettings = Field(
        default_factory=ShardingSettings,
        description="which partitions this process serves (tables larger than one node)",
    )
    logging: LoggingSettings = Field(
        default_factory=LoggingSettings, description="log format and the access log"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file's content arrives as init arguments; the environment must win over it.
        return env_settings, init_settings

    @field_validator("kafka", mode="before")
    @classmethod
    def _kafka_values(cls, raw: Any) -> dict[str, str | SecretStr]:
        if not isinstance(raw, dict):
            raise ValueError(
                "kafka must be a mapping of librdkafka settings, e.g. bootstrap_servers: HOST:PORT"
            )
        settings: dict[str, str | SecretStr] = {}
        for key, value in raw.items():
            name = _librdkafka_key(str(key))
            if isinstance(value, SecretStr):
                text = value.get_secret_value()
            elif isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, str | int | float):
                text = str(value)
            else:
                raise ValueError(
                    f"kafka.{key} must be a string, number or boolean, got {type(value).__name__}"
                )
            settings[name] = SecretStr(text) if _is_secret(name) else text
        if "bootstrap.servers" not in settings:
            raise ValueError("kafka.bootstrap_servers is required, e.g. 127.0.0.1:9092")
        return settings

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        names = [s.name for s in self.stores]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(
                f"store names must be unique (a name is one store's directory, URL and token scope);"
                f" repeated: {', '.join(duplicates)}: rename one of each"
            )
        self._check_formats()
        self._check_credentials(names)
        return self

    def _check_formats(self) -> None:
        """Every store's formats are served, and those that need a Schema Registry have one."""
        for store in self.stores:
            for what, fmt in (("key_format", store.key_format), ("value_format", store.value_format)):
                if fmt in REGISTRY_FORMATS and self.schema_registry is None:
                    raise ValueError(
                        f"store {store.name!r} has {what}: {fmt}, which needs a Schema Registry:"
                        " set schema_registry.url (STATESTORE_SCHEMA_REGISTRY__URL)"
                    )
        for store in self.stores:
            if store.key_format in REGISTRY_FORMATS and self.sharding.shards > 1:
                raise ValueError(
                    f"store {store.name!r}: key_format {store.key_format} is not served sharded (a"
                    " natural key's shard depends on the producer's key schema id): run one shard"
                    " (sharding.shards: 1) or serve the keys as bytes"
                )
            if store.value_format in UNSUPPORTED_VALUE_FORMATS or store.key_format in UNSUPPORTED_KEY_FORMATS:
                raise ValueError(
                    f"store {store.name!r}: key_format {store.key_format} / value_format"
                    f" {store.value_format} is not served yet; use bytes to serve records as they are"
                )

    def _check_credentials(self, names: list[str]) -> None:
        """Every token and certificate names only configured stores."""
        for kind, entries in (("token", self.auth.tokens), ("certificate", self.auth.certificates)):
            for entry in entries:
                unknown = [] if entry.reads_every_store else sorted(set(entry.stores) - set(names))
                if unknown:
                    raise ValueError(f"auth {kind} {entry.name!r} names unknown stores: {', '.join(unknown)}")
        if self.auth.tokens_file is not None:
            try:
                load_tokens_file(self.auth.tokens_file, names)
            except ConfigError as exc:
                raise ValueError(str(exc)) from exc

    def librdkafka_config(self) -> dict[str, str]:
        """The Kafka settings as librdkafka takes them, secrets revealed (never log this)."""
        return {
            key: value.get_secret_value() if isinstance(value, SecretStr) else value
            for key, value in self.kafka.items()
        }

    def store(self, name: str) -> StoreSettings | None:
        """The settings of the store called ``name``, if configured."""
        return next((s for s in self.stores if s.name == name), None)


def load_tokens_file(path: Path, stores: list[str] | None = None) -> list[TokenSettings]:
    """The tokens of ``auth.tokens_file`` (a YAML or JSON list shaped as ``auth.tokens``); ``stores``,
    when given, are the configured store names the tokens may name. Raises ``ConfigError``."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"auth.tokens_file: cannot read {path}: {exc}") from exc
    if not isinstance(raw, list):
        raise ConfigError(
            f"auth.tokens_file: {path} must hold a list of tokens (name, sha256, stores), as auth.tokens"
        )
    try:
        tokens = [TokenSettings.model_validate(entry) for entry in raw]
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(entry)'}: {error['msg']}" for error in exc.errors()
        )
        raise ConfigError(f"auth.tokens_file: {path} holds an invalid token: {problems}") from exc
    for token in tokens:
        unknown = [] if stores is None or token.reads_every_store else sorted(set(token.stores) - set(stores))
        if unknown:
            raise ConfigError(
                f"auth.tokens_file: token {token.name!r} in {path} names unknown stores: {', '.join(unknown)}"
            )
    return tokens


def load_settings(path: Path | str | None = None) -> Settings:
    """Read ``path`` (YAML) when given, apply ``STATESTORE_…`` overrides, and validate.

    Raises ``ConfigError`` naming the file and every invalid setting.
    """
    data: dict[str, Any] = {}
    source = "the environment"
    if path is not None:
        source = str(path)
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"configuration file {path} is not UTF-8 text (byte {exc.start} is"
                f" {exc.object[exc.start]:#04x}); save it as UTF-8"
            ) from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"configuration file {path} is not valid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"configuration file {path} must hold a mapping at the top level")
        data = loaded or {}
    try:
        return Settings(**data)
    except SettingsError as exc:
        # A STATESTORE_ variable holding a list or mapping that is not JSON.
        raise ConfigError(f"{_unparsable_variable(exc)}; give lists and mappings as JSON") from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(top level)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise ConfigError(f"invalid configuration in {source}: {problems}") from exc


def _unparsable_variable(exc: SettingsError) -> str:
    """What pydantic-settings could not parse, named as the variable the operator set."""
    field = re.search(r'field "([^"]+)"', str(exc))
    if field is None:
        return f"invalid configuration in the environment: {exc}"
    variable = next(
        (name for name in os.environ if name.upper() == f"{ENV_PREFIX}{field.group(1)}".upper()),
        f"{ENV_PREFIX}{field.group(1).upper()}",
    )
    return f"invalid configuration in the environment: {variable} is not valid JSON"


def store_configs(settings: Settings) -> list[StoreConfig]:
    """One ``store.StoreConfig`` per configured store, sharing the Kafka settings and state dir."""
    kafka = settings.librdkafka_config()
    return [
        StoreConfig(
            name=s.name,
            topic=s.topic,
            kafka=kafka,
            state_dir=settings.state_dir,
            indexes=tuple(index.spec() for index in s.indexes),
            history=s.history.spec() if s.history else None,
            tuning=s.engine.apply(settings.engine.apply(StoreTuning())),
            sharding=StoreSharding(
                shards=settings.sharding.shards,
                shard=settings.sharding.shard,
                partitioner=s.partitioner,
                placer=functools.partial(place, s.partitioner),
            ),
            value_codec=value_codec(settings, s),
            json_values=s.value_format == "json",
            key_codec=key_codec(settings, s),
        )
        for s in settings.stores
    ]


def value_codec(settings: Settings, store: StoreSettings) -> ValueCodec | None:
    """The codec that decodes the store's values at ingest, for the formats that need one.

    Schemas come from the registry's subject ``<topic>-value`` (Confluent's default
    ``TopicNameStrategy``) and are kept under ``<state_dir>/<store>.schemas``.
    """
    if store.value_format not in DECODED_FORMATS or settings.schema_registry is None:
        return None
    schemas = SchemaSource(
        settings.schema_registry.client_config(),
        f"{store.topic}-value",
        schemas_dir(settings.state_dir, store.name),
        fmt="serialized" if store.value_format == "protobuf" else None,
    )
    if store.value_format == "protobuf":
        return ProtobufValues(schemas, store.name)
    if store.value_format == "json_schema":
        return JsonSchemaValues(schemas, store.name)
    return AvroValues(schemas, store.name)


def key_codec(settings: Settings, store: StoreSettings) -> RegistryKeys | None:
    """The codec that stores the store's keys by their natural value, for Schema Registry key formats.

    Key schemas come from the subject ``<topic>-key`` and are kept under ``<state_dir>/<store>.key-schemas``.
    """
    if store.key_format not in REGISTRY_FORMATS or settings.schema_registry is None:
        return None
    directory = key_schemas_dir(settings.state_dir, store.name)
    schemas = SchemaSource(
        settings.schema_registry.client_config(),
        f"{store.topic}-key",
        directory,
        fmt="serialized" if store.key_format == "protobuf" else None,
    )
    return RegistryKeys(schemas, store.key_format, store.name, directory)


def key_schemas_dir(state_dir: Path, store: str) -> Path:
    """Where a store keeping keys by their natural value keeps the key schemas it fetched."""
    return state_dir / f"{store}.key-schemas"


def schemas_dir(state_dir: Path, store: str) -> Path:
    """Where a store decoding values at ingest keeps the schemas it fetched."""
    return state_dir / f"{store}.schemas"
