"""Every route of docs/reference/http-api.md against a real uvicorn server, with in-memory stores."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from store import IndexSpec, InMemoryStore, Position, RestoreMode, RestoreProgress, StoreState
from tests.service.conftest import RestoringStore, Service, assert_problem

POSITION = "Statestore-Position"


def test_healthz_is_alive(service: Service) -> None:
    response = service.client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "alive"}


def test_readyz_is_ready_when_every_store_is_ready(service: Service) -> None:
    response = service.client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ready",
        "stores": {"products": "READY", "notes": "READY", "blobs": "READY"},
    }


def test_readyz_is_503_while_a_store_restores_and_200_once_ready(
    make_service: Callable[..., Service],
) -> None:
    restoring = InMemoryStore("products", state=StoreState.RESTORING)
    service = make_service({"products": restoring})
    response = service.client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {"status": "not-ready", "stores": {"products": "RESTORING"}}
    restoring.set_state(StoreState.READY)
    assert service.client.get("/readyz").status_code == 200


class RebuildingStore(InMemoryStore):
    """A store rebuilding behind its last good copy: REBUILDING, and answering reads meanwhile."""

    @property
    def readable(self) -> bool:
        return True


def test_readyz_stays_200_while_a_store_rebuilds_behind_its_last_good_copy(
    make_service: Callable[..., Service],
) -> None:
    rebuilding = RebuildingStore("products", state=StoreState.REBUILDING)
    rebuilding.apply([(0, 0, b"p1", b'{"v":1}')])
    service = make_service({"products": rebuilding})
    response = service.client.get("/readyz")
    assert (response.status_code, response.json()) == (
        200,
        {"status": "ready", "stores": {"products": "REBUILDING"}},
    )
    assert service.client.get("/v1/stores/products/keys/p1").json() == {"v": 1}


def test_store_info_shows_how_far_a_restore_is_and_how_it_reads(
    make_service: Callable[..., Service],
) -> None:
    progress = RestoreProgress(
        records_applied=600,
        records_remaining=400,
        records_per_second=12_345.0,
        target=Position({0: 1000}),
        mode=RestoreMode.BULK,
    )
    service = make_service({"products": RestoringStore("products", progress)})
    restore = service.client.get("/v1/stores/products").json()["restore"]
    assert restore == {
        "records_applied": 600,
        "records_remaining": 400,
        "records_per_second": 12_345.0,
        "progress": 0.6,
        "eta_seconds": pytest.approx(400 / 12_345.0),
        "target": "0:1000",
        "mode": "bulk",
    }


def test_list_stores_describes_each_store(service: Service) -> None:
    response = service.client.get("/v1/stores")
    assert response.status_code == 200
    stores = {info["name"]: info for info in response.json()["stores"]}
    assert set(stores) == {"products", "notes", "blobs"}
    products = stores["products"]
    assert products["topic"] == "products"
    assert products["value_format"] == "json"
    assert products["state"] == "READY"
    assert products["position"] == "0:1,1:1,2:2"
    assert products["lag"] == {"0": 0, "1": 0, "2": 0}
    assert products["total_lag"] == 0
    assert products["restore"] is None
    assert products["approximate_num_keys"] == 4
    assert products["stale"] is False
    assert products["indexes"] == {}
    assert stores["notes"]["topic"] == "notes-topic"
    # The served copy's name: the same while nothing is applied, so clients may keep what they read.
    assert products["copy_id"]
    assert service.client.get("/v1/stores/products").json()["copy_id"] == products["copy_id"]


def test_store_info_carries_the_position_header(service: Service) -> None:
    response = service.client.get("/v1/stores/products")
    assert response.status_code == 200
    assert response.headers[POSITION] == "0:1,1:1,2:2"
    assert response.json()["records_applied_total"] == 4


def test_store_info_of_unknown_store_is_a_problem(service: Service) -> None:
    body = assert_problem(service.client.get("/v1/stores/nope"), 404, "unknown-store")
    assert body["store"] == "nope"
    assert body["instance"] == "/v1/stores/nope"


def test_get_json_value(service: Service) -> None:
    response = service.client.get("/v1/stores/products/keys/p1")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers[POSITION] == "0:1,1:1,2:2"
    assert response.json() == {"name": "Pen"}


def test_head_of_a_key_answers_the_get_s_headers_without_its_body(service: Service) -> None:
    # HEAD takes the framework's route; GET the short path: both answer alike.
    got = service.client.get("/v1/stores/notes/keys/n1")
    head = service.client.head("/v1/stores/notes/keys/n1")
    assert head.status_code == 200
    assert head.content == b""
    for name in ("content-type", "content-length", POSITION):
        assert head.headers[name] == got.headers[name]
    assert_problem(service.client.get("/v1/stores/notes/keys/nope"), 404, "key-not-found")
    assert service.client.head("/v1/stores/notes/keys/nope").status_code == 404


def test_get_string_and_bytes_values_use_their_content_types(service: Service) -> None:
    note = service.client.get("/v1/stores/notes/keys/n1")
    assert note.headers["content-type"] == "text/plain; charset=utf-8"
    assert note.text == "héllo"
    blob = service.client.get("/v1/stores/blobs/keys/b1")
    assert blob.headers["content-type"] == "application/octet-stream"
    assert blob.content == b"\x00\x01\xfe"


def test_percent_encoded_slash_is_part_of_the_key(service: Service) -> None:
    response = service.client.get("/v1/stores/products/keys/a%2Fb")
    assert response.status_code == 200
    assert response.json() == {"name": "Slash"}


@pytest.mark.parametrize("encoded", ["_wA", "/wA=", "_wA="])
def test_binary_key_by_base64(service: Service, encoded: str) -> None:
    response = service.client.get(f"/v1/stores/products/keys/{encoded}", params={"key_encoding": "base64"})
    assert response.status_code == 200, response.text
    assert response.json() == {"name": "Binary"}


def test_absent_key_is_key_not_found_with_position(service: Service) -> None:
    response = service.client.get("/v1/stores/products/keys/nope")
    body = assert_problem(response, 404, "key-not-found")
    assert body["store"] == "products"
    assert response.headers[POSITION] == "0:1,1:1,2:2"


def test_key_of_unknown_store(service: Service) -> None:
    assert_problem(service.client.get("/v1/stores/nope/keys/p1"), 404, "unknown-store")


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/stores/products/keys/%FF", {}),
        ("/v1/stores/products/keys/not*base64", {"key_encoding": "base64"}),
        ("/v1/stores/products/keys/p1", {"key_encoding": "rot13"}),
    ],
)
def test_bad_key_encoding(service: Service, path: str, params: dict[str, str]) -> None:
    assert_problem(service.client.get(path, params=params), 400, "bad-key-encoding")


def test_key_too_large(service: Service) -> None:
    body = assert_problem(service.client.get("/v1/stores/products/keys/" + "k" * 4097), 413, "key-too-large")
    assert body["limit"] == 4096


def test_restoring_store_is_503_with_retry_after(make_service: Callable[..., Service]) -> None:
    restoring = InMemoryStore("products", state=StoreState.RESTORING)
    restoring.apply([(0, 0, b"p1", b"{}")])
    service = make_service({"products": restoring})
    for response in (
        service.client.get("/v1/stores/products/keys/p1"),
        service.client.post("/v1/stores/products/keys:batchGet", json={"keys": ["p1"]}),
        service.client.get("/v1/stores/products/scan"),
    ):
        body = assert_problem(response, 503, "store-not-ready")
        assert body == body | {"store": "products", "state": "RESTORING"}
        assert response.headers["Retry-After"] == "1"
    # Status stays readable while the store restores.
    assert service.client.get("/v1/stores/products").json()["state"] == "RESTORING"


def test_stopped_store_is_503(make_service: Callable[..., Service]) -> None:
    stopped = InMemoryStore("products")
    service = make_service({"products": stopped})
    stopped.stop()
    body = assert_problem(service.client.get("/v1/stores/products/keys/p1"), 503, "store-not-ready")
    assert body["state"] == "STOPPED"


def test_unknown_route(service: Service) -> None:
    for path in ("/nope", "/v1/stores/products/keys", "/v1/stores/products/nope", "/v1/stores/"):
        assert_problem(service.client.get(path), 404, "route-not-found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/v1/stores/products/keys/p1"),
        ("PUT", "/v1/stores/products/keys/p1"),
        ("POST", "/v1/stores/products/keys/p1"),
        ("PATCH", "/v1/stores"),
        ("GET", "/v1/stores/products/keys:batchGet"),
        ("POST", "/healthz"),
    ],
)
def test_write_methods_are_not_allowed(service: Service, method: str, path: str) -> None:
    assert_problem(service.client.request(method, path), 405, "method-not-allowed")
    # Nothing changed.
    assert service.client.get("/v1/stores/products/keys/p1").json() == {"name": "Pen"}


def options(operation: dict[str, Any]) -> set[str]:
    """The query parameters of an operation (held by its one form-exploded ``options`` object)."""
    [held] = [p for p in operation["parameters"] if p["in"] == "query"]
    assert (held["name"], held["style"], held["explode"]) == ("options", "form", True)
    return set(held["schema"]["properties"])


def test_openapi_lists_each_stores_routes(make_service: Callable[..., Service]) -> None:
    positions = InMemoryStore("positions", indexes=[IndexSpec("by_ticker", "ticker")], keeps_history=True)
    service = make_service(
        {"products": InMemoryStore("products"), "positions": positions},
        configs=[
            {
                "name": "positions",
                "topic": "positions",
                "value_format": "json",
                "indexes": [{"name": "by_ticker", "field": "ticker"}],
                "history": {"retention_offsets": 10},
            }
        ],
    )
    paths = service.client.get("/openapi.json").json()["paths"]
    assert set(paths) >= {"/healthz", "/readyz", "/metrics", "/v1/stores"}
    for store in ("products", "notes", "blobs", "positions"):
        base = f"/v1/stores/{store}"
        assert {base, f"{base}/keys/{{key}}", f"{base}/keys:batchGet", f"{base}/scan"} <= set(paths)
    assert not [path for path in paths if "{store}" in path]
    # Index routes only for the store with indexes; as_of only for the store that keeps history.
    assert sorted(path for path in paths if "/indexes/" in path) == [
        "/v1/stores/positions/indexes/{index}/{value}",
        "/v1/stores/positions/indexes/{index}:batchGet",
    ]
    assert options(paths["/v1/stores/products/scan"]["get"]) == {
        "prefix",
        "after",
        "limit",
        "key_encoding",
        "min_position",
        "timeout_ms",
    }
    read = {"key_encoding", "min_position", "as_of", "as_of_time", "timeout_ms"}
    assert options(paths["/v1/stores/positions/scan"]["get"]) == {"prefix", "after", "limit", *read}
    lookup = paths["/v1/stores/positions/indexes/{index}/{value}"]["get"]
    assert options(lookup) == {"after", "limit", *read}
    index = next(p for p in lookup["parameters"] if p["name"] == "index")
    assert index["schema"]["enum"] == ["by_ticker"]
    batch = paths["/v1/stores/positions/indexes/{index}:batchGet"]["post"]
    assert options(batch) == {"limit_per_value", *read}
    for path, method in [
        ("/v1/stores/positions/keys/{key}", "get"),
        ("/v1/stores/positions/keys:batchGet", "post"),
    ]:
        assert "as_of" in options(paths[path][method])
        assert "410" in paths[path][method]["responses"]
    get_key = paths["/v1/stores/positions/keys/{key}"]["get"]
    held = next(p for p in get_key["parameters"] if p["in"] == "query")
    assert {"not": {"required": ["as_of", "min_position"]}} in held["schema"]["allOf"]
    # A batch's per-key times, like as_of_time, only where the store keeps history.
    for store, kept in (("positions", True), ("products", False)):
        batch_body = paths[f"/v1/stores/{store}/keys:batchGet"]["post"]["requestBody"]["content"]
        assert ("as_of_times" in batch_body["application/json"]["schema"]["properties"]) is kept


def test_value_encoding_base64_in_json_answers_for_bytes_store(service: Service) -> None:
    response = service.client.post("/v1/stores/blobs/keys:batchGet", json={"keys": ["b1"]})
    assert response.json()["values"] == [base64.b64encode(b"\x00\x01\xfe").decode()]


def test_a_string_value_is_text_only_when_it_is_utf8(make_service: Callable[..., Service]) -> None:
    notes = InMemoryStore("notes", topic="notes-topic")
    notes.apply([(0, 0, b"text", "héllo".encode()), (0, 1, b"raw", b"\xff\xfeno"), (0, 2, b"ascii", b"hi")])
    service = make_service(stores={"notes": notes})
    text = service.client.get("/v1/stores/notes/keys/text")
    assert text.headers["content-type"] == "text/plain; charset=utf-8"
    assert text.text == "héllo"
    ascii_text = service.client.get("/v1/stores/notes/keys/ascii")
    assert ascii_text.headers["content-type"] == "text/plain; charset=utf-8"
    raw = service.client.get("/v1/stores/notes/keys/raw")
    # Never labelled as text, nor answered as other bytes: an error naming the bad record.
    body = assert_problem(raw, 502, "value-not-utf8")
    assert body["store"] == "notes"
    assert raw.headers["statestore-position"] == text.headers["statestore-position"]
