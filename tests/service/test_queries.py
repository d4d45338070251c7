"""Query parameters are read once and strictly: none twice, none ignored."""

from __future__ import annotations

import pytest

from tests.service.conftest import Service, assert_problem


@pytest.mark.parametrize(
    "path",
    [
        "/v1/stores/products/keys/p1?key_encoding=utf8&key_encoding=base64",
        "/v1/stores/products/keys/p1?min_position=0:1&min_position=0:99",
        "/v1/stores/products/scan?limit=5&limit=5000",
        "/v1/stores/products/scan?prefix=p&prefix=a",
    ],
)
def test_a_parameter_given_twice_is_refused(service: Service, path: str) -> None:
    body = assert_problem(service.client.get(path), 422, "invalid-parameter")
    assert "more than once" in body["detail"]


def test_a_parameter_given_twice_is_refused_on_batches_too(service: Service) -> None:
    answer = service.client.post(
        "/v1/stores/products/keys:batchGet?timeout_ms=1&timeout_ms=2", json={"keys": ["p1"]}
    )
    assert_problem(answer, 422, "invalid-parameter")


@pytest.mark.parametrize("route", ["/v1/stores/products/keys/p1?", "/v1/stores/products/scan?prefix=p&"])
def test_a_bad_timeout_is_refused_even_without_a_position(service: Service, route: str) -> None:
    body = assert_problem(service.client.get(f"{route}timeout_ms=abc"), 422, "invalid-parameter")
    message = "must be an integer in ASCII digits, got 'abc'"
    assert body["errors"] == [{"loc": ["query", "timeout_ms"], "msg": message}]
    assert service.client.get(f"{route}timeout_ms=10").status_code == 200


def test_a_parameter_that_is_not_utf8_is_refused_by_its_own_check(service: Service) -> None:
    assert_problem(service.client.get("/v1/stores/products/scan?prefix=%FF"), 400, "bad-key-encoding")
    bad_position = service.client.get("/v1/stores/products/keys/p1?min_position=%FF")
    assert_problem(bad_position, 400, "invalid-position")
