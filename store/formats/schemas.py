"""Schemas from a Confluent Schema Registry, kept in the store's state directory.

A schema id names one immutable schema, so each one fetched is written to
``<cache_dir>/<id>.json`` and never asked again, even after a restart while the registry is
down; the latest version of the subject is kept too (``latest.json``), and asked again whenever a
record names a schema id not seen before (a version registered while serving).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from store.formats.errors import FormatError, RegistryUnavailableError, UnknownSchemaError

if TYPE_CHECKING:
    # Imported when the registry is first asked: a restore worker decoding with schemas already
    # known never pays for the client's import (about half a second).
    from confluent_kafka.schema_registry import SchemaRegistryClient

logger = logging.getLogger(__name__)

_NOT_FOUND = (40401, 40403)  # subject / schema not found


class SchemaSource:
    """Schema texts by id, and the subject's latest ``(id, text)``, cached on disk."""

    def __init__(
        self, registry: Mapping[str, str], subject: str, cache_dir: Path, fmt: str | None = None
    ) -> None:
        self.subject = subject
        # ``serialized`` for Protobuf: the schema as a base64 FileDescriptorProto, not .proto text.
        self._fmt = fmt
        self._conf = {"max.retries": "0", "timeout": "10", **registry}
        self._client: SchemaRegistryClient | None = None
        self._dir = Path(cache_dir)
        self._lock = threading.Lock()
        self._texts: dict[int, dict[str, Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        # A restore worker's copy: its own client and lock, the schemas known so far.
        state = dict(self.__dict__)
        state["_client"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _registry(self) -> SchemaRegistryClient:
        from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415

        if self._client is None:
            conf: dict[str, Any] = dict(self._conf)
            conf["max.retries"] = int(conf["max.retries"])
            conf["timeout"] = int(conf["timeout"])
            self._client = SchemaRegistryClient(conf)
        return self._client

    def schema(self, schema_id: int) -> dict[str, Any]:
        """The registered schema ``schema_id`` (``{"schema": text, "schemaType": ...}``).

        Raises ``UnknownSchemaError`` when the registry does not know it, ``RegistryUnavailableError``
        when the registry cannot be asked now.
        """
        with self._lock:
            known = self._texts.get(schema_id)
        if known is not None:
            return known
        path = self._dir / f"{schema_id}.json"
        try:
            document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            document = self._fetch(schema_id)
            self._write(path, document)
        with self._lock:
            self._texts[schema_id] = document
        return document

    def latest(self, refresh: bool = False) -> tuple[int, dict[str, Any]] | None:
        """The subject's latest version as ``(id, schema)``: cached unless ``refresh``; the cached
        one (or ``None``) when the registry cannot say."""
        path = self._dir / "latest.json"
        cached: tuple[int, dict[str, Any]] | None = None
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            cached = int(stored["id"]), stored["schema"]
        except (OSError, ValueError, KeyError, TypeError):
            cached = None
        if cached is not None and not refresh:
            return cached
        from confluent_kafka.schema_registry import SchemaRegistryError  # noqa: PLC0415

        try:
            registry = self._registry()
            # The client keeps a latest version forever otherwise.
            registry.clear_latest_caches()  # type: ignore[no-untyped-call]
            registered = registry.get_latest_version(self.subject, fmt=self._fmt)
        except SchemaRegistryError as exc:
            if exc.error_code in _NOT_FOUND:
                return cached
            logger.warning("schema registry: cannot ask the latest version of %s: %s", self.subject, exc)
            return cached
        except Exception as exc:  # the registry unreachable: keep the last known shape
            logger.warning("schema registry: cannot ask the latest version of %s: %s", self.subject, exc)
            return cached
        schema = registered.schema
        if registered.schema_id is None:
            return cached
        latest = int(registered.schema_id), {"schema": schema.schema_str, "schemaType": schema.schema_type}
        self._write(path, {"id": latest[0], "schema": latest[1]})
        return latest

    def warm(self) -> None:
        """Have the latest version and its schema cached now, before copies of this source go to
        a bulk restore's workers: they then decode the common case (every record written under the
        latest version) without a registry client of their own, whose import and start cost each
        worker about a second of CPU. The registry unavailable or not knowing the schema, nothing
        more is cached and a copy asks the registry itself, as before."""
        latest = self.latest()
        if latest is not None:
            with contextlib.suppress(FormatError):
                self.schema(latest[0])

    def _fetch(self, schema_id: int) -> dict[str, Any]:
        from confluent_kafka.schema_registry import SchemaRegistryError  # noqa: PLC0415

        try:
            schema = self._registry().get_schema(schema_id, fmt=self._fmt)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404 or exc.error_code in _NOT_FOUND:
                raise UnknownSchemaError(f"the schema registry knows no schema id {schema_id}") from exc
            raise RegistryUnavailableError(
                f"the schema registry answered {exc.http_status_code} for schema id {schema_id}: {exc}"
            ) from exc
        except Exception as exc:  # connection refused, reset, timeout, TLS: ask again later
            raise RegistryUnavailableError(
                f"cannot reach the schema registry for schema id {schema_id}: {exc!r}; ingest waits"
                " and retries (reads go on at the last position)"
            ) from exc
        return {"schema": schema.schema_str, "schemaType": schema.schema_type}

    def _write(self, path: Path, document: Mapping[str, Any]) -> None:
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps(document), encoding="utf-8")
            os.replace(temporary, path)
        except OSError as exc:  # only a cache: the next start asks the registry again
            logger.warning("cannot keep schema %s in %s: %s", path.name, self._dir, exc)
