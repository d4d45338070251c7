"""The OpenAPI document of one deployment: each configured store's operations written out.

The generic document (``service.openapi_docs``) takes any store name; this one names the stores
this service serves and gives each only the parameters it accepts (``as_of``, ``as_of_time`` and a
batch's ``as_of_times`` only where the store keeps history, index routes only where it has
indexes, the index names), with the lengths and counts the configured limits allow. Generated
clients and gateways trust the document, so a request it calls valid must be one the service
accepts.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from fastapi import FastAPI

from service.settings import Settings
from service.store_settings import StoreSettings

STORE_PATH = "/v1/stores/{store}"
# A UTF-8 character takes up to 4 bytes: this many characters always fit the byte limit.
_UTF8_MAX_BYTES_PER_CHAR = 4
_LENGTH_LIMITED = {"key", "value", "prefix", "after"}
# A byte of a URL can take three (%XX) percent-encoded.
_PERCENT_ENCODED_BYTES = 3
# Bytes of a request target left for the path, the store and index names and the short parameters.
_URL_RESERVE_BYTES = 1024
# Standard or URL-safe base64, padding optional (what ``key_encoding=base64`` accepts).
_B64 = "[A-Za-z0-9+/_-]"
BASE64_PATTERN = rf"^(?:{_B64}{{4}})*(?:{_B64}{{2}}(?:==)?|{_B64}{{3}}=?)?(?![\s\S])"
# The query parameter that holds an operation's query parameters, as one object: OpenAPI can
# only state which parameters exclude or shape each other within one schema.
OPTIONS = "options"
# Read from history: documented only for stores that keep it.
_HISTORY_PARAMS = {"as_of", "as_of_time"}


def install(app: FastAPI, settings: Settings) -> None:
    """Serve the deployment's document at ``/openapi.json`` (built once, on the first ask)."""
    generic = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = deployment_document(generic(), settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def deployment_document(document: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """``document`` with every path under ``/v1/stores/{store}`` repeated for each configured store."""
    out = copy.deepcopy(document)
    paths: dict[str, Any] = {}
    for path, operations in document["paths"].items():
        if not path.startswith(STORE_PATH) or not settings.stores:
            paths[path] = copy.deepcopy(operations)
            continue
        for store in settings.stores:
            if ("{index}" in path and not store.indexes) or (
                path.endswith("/history") and store.history is None
            ):
                continue
            paths[path.replace("{store}", store.name)] = {
                method: _for_store(operation, store, settings) for method, operation in operations.items()
            }
    out["paths"] = paths
    out.setdefault("tags", []).extend(
        {"name": store.name, "description": f"the store {store.name} ({store.value_format} values)"}
        for store in settings.stores
    )
    return out


def _for_store(operation: dict[str, Any], store: StoreSettings, settings: Settings) -> dict[str, Any]:
    written = copy.deepcopy(operation)
    written["operationId"] = f"{operation['operationId']}__{re.sub(r'[^A-Za-z0-9_]', '_', store.name)}"
    written["tags"] = [store.name]
    parameters = []
    query: dict[str, Any] = {}
    required: list[str] = []
    for parameter in written.get("parameters", []):
        name = parameter["name"]
        if name == "store" or (name in _HISTORY_PARAMS and store.history is None):
            continue
        schema = parameter["schema"]
        if name == "index":
            schema["enum"] = [index.name for index in store.indexes]
        elif name in _LENGTH_LIMITED:
            schema["maxLength"] = _max_length(written, settings)
        elif name in {"limit", "limit_per_value"}:
            schema["maximum"] = settings.limits.max_scan_limit
        if parameter["in"] == "query":
            query[name] = {**schema, "description": parameter["description"]}
            if parameter.get("required"):
                required.append(name)
        else:
            parameters.append(parameter)
    if query:
        parameters.append(_options(query, required))
    written["parameters"] = parameters
    body = written.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body is not None:
        if store.history is None:
            body.get("properties", {}).pop("as_of_times", None)
        _limit_batch_body(body, settings)
    return written


def _max_length(operation: dict[str, Any], settings: Settings) -> int:
    """Characters a key-like parameter may hold: its bytes within ``max_key_bytes``, and all of the
    operation's key-like parameters, percent-encoded, within ``max_url_bytes`` (a longer target
    gets 414 uri-too-long) beside the path and the other parameters."""
    in_url = [p for p in operation.get("parameters", []) if p["name"] in _LENGTH_LIMITED]
    url_share = (settings.limits.max_url_bytes - _URL_RESERVE_BYTES) // max(1, len(in_url))
    return max(0, min(settings.limits.max_key_bytes, url_share // _PERCENT_ENCODED_BYTES)) // (
        _UTF8_MAX_BYTES_PER_CHAR
    )


def _options(query: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """The query parameters as one form-exploded object (on the wire: ``?limit=10&as_of=0:5``)
    whose schema says which exclude each other and how ``key_encoding`` shapes the keys."""
    rules: list[dict[str, Any]] = []
    keyed = [name for name in ("prefix", "after") if name in query]
    if "key_encoding" in query and keyed:
        base64 = {name: {"pattern": BASE64_PATTERN} for name in keyed}
        rules.append(
            {
                "anyOf": [
                    {"properties": {"key_encoding": {"const": "utf8"}}},
                    {"properties": {"key_encoding": {"const": "base64"}, **base64}},
                ]
            }
        )
    if "as_of" in query and "min_position" in query:
        rules.append({"not": {"required": ["as_of", "min_position"]}})
    # Other query parameters are ignored, but each parameter may be given once (a repeated one,
    # known or not, gets 422 invalid-parameter): the document lists only those the route reads.
    schema: dict[str, Any] = {"type": "object", "properties": query, "additionalProperties": False}
    if required:
        schema["required"] = required
    if rules:
        schema["allOf"] = rules
    names = ", ".join(query)
    return {
        "name": OPTIONS,
        "in": "query",
        "required": bool(required),
        "style": "form",
        "explode": True,
        "schema": schema,
        "description": (
            f"the query parameters ({names}), each its own key=value pair on the wire, each at most once"
            " (a repeated parameter gets 422 invalid-parameter)"
        ),
    }


def _limit_batch_body(schema: dict[str, Any], settings: Settings) -> None:
    """A batch body's item count and item length as the limits allow; base64 keys with
    ``key_encoding: base64``."""
    if "limit_per_value" in schema.get("properties", {}):
        schema["properties"]["limit_per_value"]["maximum"] = settings.limits.max_scan_limit
    for name in ("keys", "values"):
        items = schema.get("properties", {}).get(name)
        if items is not None:
            items["maxItems"] = settings.limits.max_batch_keys
            items["items"]["maxLength"] = settings.limits.max_key_bytes // _UTF8_MAX_BYTES_PER_CHAR
    if "keys" in schema.get("properties", {}):
        base64_keys = {"keys": {"items": {"pattern": BASE64_PATTERN}}}
        schema["anyOf"] = [
            {"properties": {"key_encoding": {"enum": ["utf8", None]}}},
            {"properties": {"key_encoding": {"const": "base64"}, **base64_keys}},
        ]
