"""The service's configuration: one YAML file, every key overridable by ``STATESTORE_…`` variables.

Nested keys are joined by ``__`` (``STATESTORE_HTTP__PORT=9000``); the environment wins over the
file. Lists and mappings can also be given as JSON (``STATESTORE_STORES='[{"name": ...}]'``).
Kafka settings pass through to librdkafka; values whose key looks secret (``sasl.password``,
``ssl.key.password``, ...) are held as ``SecretStr`` and never logged or shown.

This module holds the root (:class:`Settings`, :func:`load_settings`) and what turns it into the
store's configuration; the sections live beside it: ``store_settings`` (a store, its formats and the
Schema Registry), ``engine_settings``, ``limit_settings`` and ``auth_settings``.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from clients.partitioners import place
from service.auth_settings import AuthSettings, load_tokens_file
from service.engine_settings import ServiceEngineSettings
from service.exceptions import ConfigError
from service.limit_settings import LimitSettings
from service.store_settings import (
    DECODED_FORMATS,
    REGISTRY_FORMATS,
    SchemaRegistrySettings,
    ShardingSettings,
    StoreSettings,
    key_schemas_dir,
    schemas_dir,
)
from store import StoreConfig, StoreSharding, StoreTuning
from store.formats import ValueCodec
from store.formats.avro import AvroValues
from store.formats.json_schema import JsonSchemaValues
from store.formats.keys import RegistryKeys
from store.formats.protobuf import ProtobufValues
from store.formats.schemas import SchemaSource

ENV_PREFIX = "STATESTORE_"

_SECRET_MARKERS = ("password", "secret", "token", "ssl.key.pem", "private")


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
                by_natural_key=s.key_format in REGISTRY_FORMATS,
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
