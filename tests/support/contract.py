"""The service's rules that the fuzzing tests apply to generated requests and answers."""

from __future__ import annotations

import base64
import re
from typing import Any
from urllib.parse import unquote

import schemathesis
from schemathesis.specs.openapi.checks import (
    positive_data_acceptance,
)

from service.openapi_docs import ARROW_MEDIA_TYPE
from service.openapi_stores import BASE64_PATTERN

BASE64 = BASE64_PATTERN.removeprefix("^").removesuffix(r"(?![\s\S])")


def _base64(key: Any) -> str:
    return base64.urlsafe_b64encode(str(key).encode("utf-8", "surrogatepass")).decode("ascii")


def accepts_valid_requests(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    """positive_data_acceptance, except for an ``as_of`` older than the history the store still
    keeps (410 history-expired): which positions that is changes as the store runs, so no
    document can say; like a 404, it is an answer about the data, not about the request. An Arrow
    body is described as binary (OpenAPI has no schema for an Arrow stream's columns), so the
    requests that send one are checked by the answer's shape alone."""
    if case.media_type == ARROW_MEDIA_TYPE:
        return None
    if response.status_code == 410 and response.json()["type"].endswith(":history-expired"):
        return None
    # A page holding a stored key that is not UTF-8, asked for as text: the data decides, as with
    # 410, and the answer says to ask again with key_encoding=base64.
    if response.status_code == 400 and response.json()["detail"].startswith("the store holds key"):
        return None
    return positive_data_acceptance(ctx, response, case)


def follow_the_cross_location_rules(case: schemathesis.Case) -> None:
    """The rules that tie a query parameter to the path or the body, which OpenAPI cannot state
    (the parameters' descriptions do): with ``key_encoding=base64`` in the query, a path key is
    base64, and a JSON body without its own ``key_encoding`` follows the query's; a batch's
    ``as_of_times`` hold one time per key, and are given instead of the query's ``as_of_time``."""
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if positive:
        _one_time_per_key(case)
    if not positive or (case.query or {}).get("key_encoding") != "base64":
        return
    if "key" in (case.path_parameters or {}):
        # schemathesis has percent-encoded the path parameters already: the key is what that encodes.
        case.path_parameters["key"] = _base64(unquote(str(case.path_parameters["key"])))
    if isinstance(case.body, dict) and "keys" in case.body:
        if case.body.get("key_encoding") is None:
            case.body["key_encoding"] = "base64"
        if case.body["key_encoding"] == "base64" and isinstance(case.body["keys"], list):
            case.body["keys"] = [k if re.fullmatch(BASE64, str(k)) else _base64(k) for k in case.body["keys"]]


def _one_time_per_key(case: schemathesis.Case) -> None:
    body = case.body
    if not isinstance(body, dict) or not isinstance(body.get("as_of_times"), list):
        return
    if isinstance(case.query, dict):
        case.query.pop("as_of_time", None)
    keys, times = body.get("keys"), body["as_of_times"]
    if isinstance(keys, list):
        body["as_of_times"] = [times[i % len(times)] if times else 0 for i in range(len(keys))]
