"""A Schema Registry stand-in: an HTTP server on a free loopback port speaking the part of the
Confluent Schema Registry REST API that confluent-kafka's serializers, its ``SchemaRegistryClient``
and the service call.

Routes: ``POST /subjects/{subject}/versions`` (register), ``POST /subjects/{subject}`` (look a
schema up), ``GET /schemas/ids/{id}``, ``GET /schemas/ids/{id}/versions``,
``GET /schemas/ids/{id}/subjects``, ``GET /subjects``, ``GET /subjects/{subject}/versions``,
``GET /subjects/{subject}/versions/{version|latest}``, ``GET /schemas/types``; errors as the
registry answers them (``{"error_code": 40401, "message": ...}``). ``down()`` makes every request
fail as an unreachable server would (the connection is closed without an answer); ``up()`` heals.
Requests are counted by route (``calls``), so tests can count what the service asked.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from service.local.broker import free_port

SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
INVALID_SCHEMA = 42201
_JSON = "application/vnd.schemaregistry.v1+json"


@dataclasses.dataclass(frozen=True)
class _Schema:
    schema: str
    schema_type: str  # AVRO, PROTOBUF or JSON
    references: tuple[tuple[str, str, int], ...]  # (name, subject, version)

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema": self.schema}
        if self.schema_type != "AVRO":
            doc["schemaType"] = self.schema_type
        if self.references:
            doc["references"] = [
                {"name": name, "subject": subject, "version": version}
                for name, subject, version in self.references
            ]
        return doc


class _Error(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class FakeSchemaRegistry:
    """The registry's state: schemas by id (ids shared across subjects, as the real one does) and
    each subject's versions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._schemas: list[_Schema] = []  # id i + 1 at index i
        self._subjects: dict[str, list[int]] = {}  # subject -> schema id per version
        self.calls: collections.Counter[str] = collections.Counter()
        self._down = False
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # -- control --------------------------------------------------------------------------------

    def down(self) -> None:
        """Answer nothing from now on, as a registry that cannot be reached."""
        self._down = True

    def up(self) -> None:
        self._down = False

    @property
    def is_down(self) -> bool:
        return self._down

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """Register ``schema`` under ``subject`` directly (no HTTP); its id."""
        return self._register(subject, {"schema": schema, "schemaType": schema_type})["id"]  # type: ignore[no-any-return]

    # -- the API --------------------------------------------------------------------------------

    def _register(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        schema = self._parse(body)
        with self._lock:
            try:
                schema_id = self._schemas.index(schema) + 1
            except ValueError:
                self._schemas.append(schema)
                schema_id = len(self._schemas)
            versions = self._subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            version = versions.index(schema_id) + 1
        return {"id": schema_id, "subject": subject, "version": version, **schema.document()}

    def _parse(self, body: dict[str, Any]) -> _Schema:
        text = body.get("schema")
        schema_type = body.get("schemaType") or "AVRO"
        if not isinstance(text, str) or schema_type not in {"AVRO", "PROTOBUF", "JSON"}:
            raise _Error(422, INVALID_SCHEMA, "Invalid schema")
        if schema_type in {"AVRO", "JSON"}:
            try:
                json.loads(text)
            except ValueError as exc:
                raise _Error(422, INVALID_SCHEMA, f"Invalid schema: {exc}") from exc
        references = tuple(
            (ref["name"], ref["subject"], int(ref["version"])) for ref in body.get("references") or ()
        )
        return _Schema(text, schema_type, references)

    def _schema(self, schema_id: int) -> _Schema:
        with self._lock:
            if not 1 <= schema_id <= len(self._schemas):
                raise _Error(404, SCHEMA_NOT_FOUND, f"Schema {schema_id} not found")
            return self._schemas[schema_id - 1]

    def _versions(self, subject: str) -> list[int]:
        with self._lock:
            versions = self._subjects.get(subject)
            if not versions:
                raise _Error(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
            return list(versions)

    def _version(self, subject: str, version: str) -> dict[str, Any]:
        versions = self._versions(subject)
        if version in {"latest", "-1"}:
            number = len(versions)
        elif version.isdigit() and 1 <= int(version) <= len(versions):
            number = int(version)
        else:
            raise _Error(404, VERSION_NOT_FOUND, f"Version {version} not found.")
        schema_id = versions[number - 1]
        return {"subject": subject, "version": number, "id": schema_id, **self._schema(schema_id).document()}

    def _lookup(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        wanted = self._parse(body)
        for number, schema_id in enumerate(self._versions(subject), start=1):
            if self._schema(schema_id) == wanted:
                return {"subject": subject, "version": number, "id": schema_id, **wanted.document()}
        raise _Error(404, SCHEMA_NOT_FOUND, "Schema not found")

    def answer(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        """The answer to one request (raises ``_Error`` for an error answer)."""
        parts = [unquote(part) for part in path.strip("/").split("/")]
        self.calls[f"{method} {path}"] += 1
        match method, parts:
            case "POST", ["subjects", subject, "versions"]:
                return self._register(subject, body or {})
            case "POST", ["subjects", subject]:
                return self._lookup(subject, body or {})
            case "GET", ["subjects"]:
                with self._lock:
                    return sorted(self._subjects)
            case "GET", ["subjects", subject, "versions"]:
                return list(range(1, len(self._versions(subject)) + 1))
            case "GET", ["subjects", subject, "versions", version]:
                return self._version(subject, version)
            case "GET", ["schemas", "types"]:
                return ["JSON", "PROTOBUF", "AVRO"]
            case "GET", ["schemas", "ids", raw_id] if raw_id.isdigit():
                return self._schema(int(raw_id)).document()
            case "GET", ["schemas", "ids", raw_id, "subjects"] if raw_id.isdigit():
                self._schema(int(raw_id))
                with self._lock:
                    return sorted(s for s, ids in self._subjects.items() if int(raw_id) in ids)
            case "GET", ["schemas", "ids", raw_id, "versions"] if raw_id.isdigit():
                self._schema(int(raw_id))
                with self._lock:
                    return [
                        {"subject": s, "version": ids.index(int(raw_id)) + 1}
                        for s, ids in sorted(self._subjects.items())
                        if int(raw_id) in ids
                    ]
        raise _Error(404, 404, f"HTTP 404 Not Found: {method} {path}")

    # -- serving --------------------------------------------------------------------------------

    def serve(self) -> None:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self, method: str) -> None:
                if registry.is_down:
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(2)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                split = urlsplit(self.path)
                parse_qs(split.query)  # accepted and ignored: normalize, subject, format, ...
                try:
                    body = json.loads(raw) if raw else None
                    status, document = 200, registry.answer(method, split.path, body)
                except _Error as exc:
                    status, document = exc.status, {"error_code": exc.code, "message": exc.message}
                except ValueError:
                    status, document = 400, {"error_code": 400, "message": "Unrecognized JSON body"}
                payload = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", _JSON)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        port = free_port("127.0.0.1")
        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, name=f"schema-registry-{port}", daemon=True
        ).start()
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@contextlib.contextmanager
def schema_registry() -> Iterator[FakeSchemaRegistry]:
    """A running stand-in registry; stopped on exit."""
    registry = FakeSchemaRegistry()
    registry.serve()
    try:
        yield registry
    finally:
        registry.stop()
