"""The per-store OpenAPI document follows the request bounds: a target's length and one value a parameter."""

from __future__ import annotations

from typing import Any

from service.app import create_app
from service.settings import Settings
from store import InMemoryStore


def document(**limits: Any) -> dict[str, Any]:
    settings = Settings(stores=[{"name": "products", "topic": "products"}], limits=limits)
    return create_app(settings, {"products": InMemoryStore("products")}).openapi()


def scan_options(doc: dict[str, Any]) -> dict[str, Any]:
    operation = doc["paths"]["/v1/stores/products/scan"]["get"]
    (options,) = [p for p in operation["parameters"] if p["name"] == "options"]
    return options


def test_key_lengths_fit_the_url_bound_as_well_as_the_key_bound() -> None:
    roomy = scan_options(document(max_key_bytes=4096))["schema"]["properties"]
    assert roomy["prefix"]["maxLength"] == roomy["after"]["maxLength"] == 1024
    # Two key-like parameters, each char up to 4 UTF-8 bytes and each byte %XX in the target.
    tight = scan_options(document(max_key_bytes=4096, max_url_bytes=4096))["schema"]["properties"]
    longest = tight["prefix"]["maxLength"]
    assert longest < 1024
    assert 1024 + 2 * longest * 4 * 3 <= 4096


def test_the_query_lists_only_what_the_route_reads_each_once() -> None:
    options = scan_options(document())
    assert options["schema"]["additionalProperties"] is False
    assert "422 invalid-parameter" in options["description"]


def test_every_store_operation_documents_the_head_and_target_bounds() -> None:
    store_paths = {p: o for p, o in document()["paths"].items() if p.startswith("/v1/stores")}
    assert len(store_paths) == 5
    for path, operations in store_paths.items():
        for method, operation in operations.items():
            assert {"414", "431"} <= {str(s) for s in operation["responses"]}, (method, path)
