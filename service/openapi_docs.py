"""OpenAPI descriptions of the routes, written by hand.

The handlers parse their own parameters (so every bad input gets the problem type the contract
names, and the hot paths skip model validation); these descriptions are what clients and the
fuzzing tests see.
"""

from __future__ import annotations

from typing import Any

from service.problems import PROBLEM_MEDIA_TYPE, problem_schema

ARROW_MEDIA_TYPE = "application/vnd.apache.arrow.stream"
POSITION_HEADER = "Statestore-Position"

# partition:next_offset pairs joined by commas, each partition once, no leading zeros, within
# Kafka's ranges; spaces and tabs may surround entries; empty (or blank) is the empty position.
# ``(?![\s\S])`` ends the text in both ECMAScript and Python regexes (``$`` passes a final newline).
_POSITION_ENTRY = r"[ \t]*(?:0|[1-9][0-9]{0,8}):(?:0|[1-9][0-9]{0,17})[ \t]*"
_POSITION_PATTERN = (
    r"^(?!(?:.*,)?[ \t]*([0-9]+):.*,[ \t]*\1:)"
    rf"(?:[ \t]*|{_POSITION_ENTRY}(?:,{_POSITION_ENTRY})*)(?![\s\S])"
)
# A time (``service.times``): epoch ms, or an RFC 3339 date-time with its offset. Days are checked
# against their month (29 February of leap years only), as the service's calendar checks them.
_YEAR = "[1-9][0-9]{3}"
_LEAP_YEAR = "(?:[1-9][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[13579][26])00)"
_DAY = (
    rf"(?:{_YEAR}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)"
    rf"|(?:0[13578]|1[02])-31)|{_LEAP_YEAR}-02-29)"
)
_CLOCK = (
    r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
TIME_PATTERN = rf"^(?:-?[0-9]{{1,18}}|{_DAY}T{_CLOCK})(?![\s\S])"
_JSON_TIME = {
    "anyOf": [
        {"type": "integer", "minimum": -(10**18) + 1, "maximum": 10**18 - 1},
        {"type": "string", "pattern": TIME_PATTERN},
    ]
}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _path(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": description,
    }


STORE_PARAM = _path("store", "the store's configured name")
KEY_PARAM = _path("key", "the key: UTF-8, percent-encoded; base64 of the raw bytes with key_encoding=base64")
KEY_ENCODING_PARAM = _query(
    "key_encoding",
    {"type": "string", "enum": ["utf8", "base64"], "default": "utf8"},
    "how keys are written (the path's key, prefix, after, and the keys of answers); a JSON body's own"
    " key_encoding wins",
)
MIN_POSITION_PARAM = _query(
    "min_position",
    {"type": "string", "pattern": _POSITION_PATTERN},
    "wait until the store reaches this position (partition:next_offset pairs joined by commas)",
)
AS_OF_PARAM = _query(
    "as_of",
    {"type": "string", "pattern": _POSITION_PATTERN},
    "answer as of exactly this position (stores that keep history); excludes min_position",
)
TIMEOUT_PARAM = _query(
    "timeout_ms",
    {"type": "integer", "minimum": 0, "maximum": 3_600_000},
    "how long to wait for min_position or as_of, at most the configured maximum (read only with one of them)",
)
AS_OF_TIME_PARAM = _query(
    "as_of_time",
    {"type": "string", "pattern": TIME_PATTERN},
    "answer as of this time (epoch milliseconds or RFC 3339): each key's record with the greatest"
    " timestamp at or below it (stores that keep history); combines with as_of or min_position",
)
READ_PARAMS = [MIN_POSITION_PARAM, AS_OF_PARAM, AS_OF_TIME_PARAM, TIMEOUT_PARAM]

SCAN_PARAMS = [
    _query("prefix", {"type": "string", "default": ""}, "only keys starting with this prefix"),
    _query("after", {"type": "string"}, "the cursor: only keys sorting strictly after this one"),
    _query("limit", {"type": "integer", "minimum": 1, "default": 100}, "page size"),
]

INDEX_PARAM = _path("index", "the index's configured name")
INDEXED_VALUE_PARAM = _path(
    "value", "the indexed value: text, UTF-8, percent-encoded (a number as its JSON text)"
)
INDEX_PAGE_PARAMS = [
    _query("after", {"type": "string"}, "the cursor: only rows whose key sorts strictly after this one"),
    _query("limit", {"type": "integer", "minimum": 1, "default": 100}, "page size"),
]
LIMIT_PER_VALUE_PARAM = _query(
    "limit_per_value",
    {"type": "integer", "minimum": 1, "default": 1000},
    "rows answered per value at most (a JSON body's limit_per_value wins)",
)

_POSITION_HEADER_DOC = {
    POSITION_HEADER: {
        "description": "the store position the answer was read from",
        "schema": {"type": "string"},
    }
}

# A JSON body's key_encoding wins over the query's; null counts as not given.
_BODY_KEY_ENCODING = {
    "type": ["string", "null"],
    "enum": ["utf8", "base64", None],
    "description": "how the keys are written; null or absent: the query's key_encoding, else utf8",
}

_PROBLEM_CONTENT = {PROBLEM_MEDIA_TYPE: {"schema": problem_schema()}}


# Any request may meet these, before its route is known: a target or head too long (414, 431).
_EVERY_REQUEST = (414, 431)


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses`` entries for problem answers with the given statuses (and those of every request)."""
    return {
        status: {"description": "a problem (RFC 9457); clients map on `type`", "content": _PROBLEM_CONTENT}
        for status in sorted({*statuses, *_EVERY_REQUEST})
    }


STORE_INFO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "topic", "value_format", "state", "position"],
    "properties": {
        "name": {"type": "string"},
        "topic": {"type": "string"},
        "value_format": {
            "type": "string",
            "enum": ["bytes", "string", "json", "avro", "protobuf", "json_schema"],
        },
        # for a store decoding its values at ingest: their Spark DDL, from the latest schema
        "value_schema": {"type": ["string", "null"]},
        # avro, protobuf, json_schema: keys written through the Schema Registry, none decoded yet
        "key_format": {
            "type": "string",
            "enum": ["bytes", "string", "long", "int", "avro", "protobuf", "json_schema"],
        },
        # keys written through the Schema Registry: how (key_format is then their natural format)
        "key_schema_format": {"type": "string", "enum": ["avro", "protobuf", "json_schema"]},
        "state": {
            "type": "string",
            "enum": ["CREATED", "RESTORING", "READY", "REBUILDING", "STOPPED", "FAILED"],
        },
        "position": {"type": "string"},
        "end_offsets": {"type": "string"},
        "lag": {"type": "object", "additionalProperties": {"type": "integer"}},
        "total_lag": {"type": "integer"},
        "restore": {
            "type": ["object", "null"],
            "description": "progress while the store is not READY; null once READY",
            "properties": {
                "records_applied": {"type": "integer"},
                "records_remaining": {"type": "integer"},
                "records_per_second": {"type": "number"},
                "progress": {"type": "number", "minimum": 0, "maximum": 1},
                "eta_seconds": {"type": ["number", "null"]},
                "target": {"type": "string"},
                "mode": {"type": "string", "enum": ["bulk", "records", "waiting"]},
            },
        },
        "records_applied_total": {"type": "integer"},
        "null_key_records": {"type": "integer"},
        "approximate_num_keys": {
            "type": "integer",
            "description": "RocksDB's estimate of the number of keys: approximate, not a count",
        },
        "counted_keys": {
            "type": ["integer", "null"],
            "description": "Keys holding a value, counted exactly at counted_keys_position (null until"
            " first counted); counted again once the records applied since pass a quarter of it",
        },
        "counted_keys_position": {
            "type": ["string", "null"],
            "description": "The position counted_keys was counted at",
        },
        "copy_id": {
            "type": "string",
            "description": "names the served copy of the table: the same copy_id at the same position"
            " always answers the same rows (a rebuild, a reopen or a restart gives a new one)",
        },
        "size_on_disk_bytes": {"type": "integer"},
        "last_error": {"type": ["string", "null"]},
        "seconds_since_last_contact": {"type": ["number", "null"]},
        "stale": {"type": "boolean"},
        "corruption": {
            "type": ["object", "null"],
            "properties": {
                "detail": {"type": "string"},
                "file": {"type": ["string", "null"]},
                "found_by": {"type": "string", "enum": ["read", "verification", "materializer"]},
                "found_at": {"type": "number"},
            },
        },
        "corruptions_found": {"type": "integer"},
        "verification_passes": {"type": "integer"},
        "memory": {
            "type": ["object", "null"],
            "properties": {
                "block_cache_capacity_bytes": {"type": "integer"},
                "block_cache_usage_bytes": {"type": "integer"},
                "memtable_bytes": {"type": "integer"},
                "read_cache_entries": {"type": "integer"},
                "timeline_entries": {"type": "integer"},
                "timeline_bytes": {"type": "integer"},
            },
        },
        "indexes": {"type": "object", "additionalProperties": {"type": "object"}},
        "history": {
            "type": ["object", "null"],
            "properties": {
                "floor": {"type": ["string", "null"]},
                "retention_ms": {"type": ["integer", "null"]},
                "retention_offsets": {"type": ["integer", "null"]},
            },
        },
    },
}

_ANY_JSON: dict[str, Any] = {}


def ok_json(schema: dict[str, Any], description: str, *, positioned: bool = True) -> dict[int | str, Any]:
    answer: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": schema}}}
    if positioned:
        answer["headers"] = _POSITION_HEADER_DOC
    return {200: answer}


STORE_LIST_RESPONSES = ok_json(
    {
        "type": "object",
        "required": ["stores"],
        "properties": {"stores": {"type": "array", "items": STORE_INFO_SCHEMA}},
    },
    "every configured store",
    positioned=False,
)

STORE_INFO_RESPONSES = {
    **ok_json(STORE_INFO_SCHEMA, "the store's status"),
    **problems(401, 403, 404, 429, 503),
}

GET_KEY_RESPONSES: dict[int | str, Any] = {
    200: {
        "description": "the value; the content type follows the store's value format (a `string`"
        " store's value that is not UTF-8 is a 502 value-not-utf8 problem)",
        "headers": _POSITION_HEADER_DOC,
        "content": {
            "application/json": {"schema": _ANY_JSON},
            "text/plain": {"schema": {"type": "string"}},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    },
    **problems(400, 401, 403, 404, 410, 413, 422, 429, 502, 503),
}

BATCH_REQUEST_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["keys"],
                "properties": {
                    "keys": {"type": "array", "items": {"type": "string"}},
                    "key_encoding": _BODY_KEY_ENCODING,
                    "as_of_times": {
                        "type": "array",
                        "items": _JSON_TIME,
                        "description": "one time per key, parallel to keys (epoch ms or RFC 3339)",
                    },
                },
            }
        },
        ARROW_MEDIA_TYPE: {
            "schema": {
                "type": "string",
                "format": "binary",
                "description": "Arrow IPC stream: a `key` column, then optionally `as_of_time`"
                " (timestamp or int64 epoch ms), one time per key",
            }
        },
    },
}

BATCH_RESPONSES: dict[int | str, Any] = {
    200: {
        "description": "the values in request order (null for absent keys, whose places `absent` lists;"
        " a null elsewhere is a stored JSON null)",
        "headers": _POSITION_HEADER_DOC,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["values", "absent", "position"],
                    "properties": {
                        "values": {"type": "array"},
                        "absent": {"type": "array", "items": {"type": "integer"}},
                        "position": {"type": "string"},
                    },
                }
            },
            ARROW_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
        },
    },
    **problems(400, 401, 403, 404, 410, 413, 415, 422, 429, 503),
}

SCAN_RESPONSES: dict[int | str, Any] = {
    **ok_json(
        {
            "type": "object",
            "required": ["items", "next_after", "position"],
            "properties": {
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["key", "value"],
                        "properties": {"key": {"type": "string"}, "value": _ANY_JSON},
                    },
                },
                "next_after": {"type": ["string", "null"]},
                "position": {"type": "string"},
            },
        },
        "one page of keys starting with the prefix, byte-ordered; with `Accept: "
        f"{ARROW_MEDIA_TYPE}` an Arrow stream of binary `key` (stored) and `value` columns, the "
        "cursor in the schema metadata `next_after` (absent after the last page)",
    ),
    **problems(400, 401, 403, 404, 410, 413, 422, 429, 503),
}
SCAN_RESPONSES[200]["content"][ARROW_MEDIA_TYPE] = {"schema": {"type": "string", "format": "binary"}}

_ROW_ITEMS = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["key", "value"],
        "properties": {"key": {"type": "string"}, "value": _ANY_JSON},
    },
}

INDEX_RESPONSES: dict[int | str, Any] = {
    **ok_json(
        {
            "type": "object",
            "required": ["items", "next_after", "position"],
            "properties": {
                "items": _ROW_ITEMS,
                "next_after": {"type": ["string", "null"]},
                "position": {"type": "string"},
            },
        },
        "one page of the rows whose indexed field equals the value, ordered by row key",
    ),
    **problems(400, 401, 403, 404, 410, 413, 422, 429, 503),
}

INDEX_BATCH_REQUEST_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["values"],
                "properties": {
                    "values": {"type": "array", "items": {"type": "string"}},
                    "limit_per_value": {"type": "integer", "minimum": 1},
                    "key_encoding": _BODY_KEY_ENCODING,
                },
            }
        },
        ARROW_MEDIA_TYPE: {
            "schema": {
                "type": "string",
                "format": "binary",
                "description": "Arrow IPC stream, one `value` column (string)",
            }
        },
    },
}

INDEX_BATCH_RESPONSES: dict[int | str, Any] = {
    200: {
        "description": "the rows of every value asked, in request order",
        "headers": _POSITION_HEADER_DOC,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["results", "position"],
                    "properties": {
                        "results": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["value", "items", "next_after"],
                                "properties": {
                                    "value": {"type": "string"},
                                    "items": _ROW_ITEMS,
                                    "next_after": {"type": ["string", "null"]},
                                },
                            },
                        },
                        "position": {"type": "string"},
                    },
                }
            },
            ARROW_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}},
        },
    },
    **problems(400, 401, 403, 404, 410, 413, 415, 422, 429, 503),
}

HEALTH_RESPONSES = ok_json(
    {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string", "enum": ["alive"]}},
    },
    "the process is alive",
    positioned=False,
)

_READY_SCHEMA = {
    "type": "object",
    "required": ["status", "stores"],
    "properties": {
        "status": {"type": "string", "enum": ["ready", "not-ready"]},
        "stores": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
READY_RESPONSES: dict[int | str, Any] = {
    200: {"description": "every store is READY", "content": {"application/json": {"schema": _READY_SCHEMA}}},
    503: {
        "description": "some store is not READY",
        "content": {"application/json": {"schema": _READY_SCHEMA}},
    },
}

METRICS_RESPONSES: dict[int | str, Any] = {
    200: {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}}
}
