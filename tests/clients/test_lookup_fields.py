"""A typed lookup fetches only the fields its output needs (``fields=`` on the wire)."""

from __future__ import annotations

import httpx
import pyarrow as pa

from clients import StatestoreClient
from clients.lookup import Lookup, LookupSpec
from clients.options import ClientOptions
from store import InMemoryStore
from tests.clients.conftest import ServeStores


class AnswerBytes(httpx.HTTPTransport):
    """A real HTTP transport that records the ``fields`` asked and the answer bytes of batch gets."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[str | None] = []
        self.answer_bytes = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.url.path.endswith(":batchGet"):
            self.fields.append(request.url.params.get("fields"))
            self.answer_bytes += len(response.read())
        return response


def test_a_lookup_with_fields_fetches_only_them(serve_stores: ServeStores) -> None:
    store = InMemoryStore("products")
    padding = "x" * 400
    store.apply(
        [
            (
                0,
                i,
                f"p{i}".encode(),
                b'{"name": "n%d", "price": %d, "notes": "%s"}' % (i, i, padding.encode()),
            )
            for i in range(20)
        ]
    )
    url = serve_stores({"products": (store, "json")})
    value_type = pa.struct([("name", pa.string())])
    keys = pa.array([f"p{i}" for i in range(20)])
    sizes = {}
    for fields in (None, ("name",)):
        transport = AnswerBytes()
        spec = LookupSpec(ClientOptions(url), "products", "0:20", "json", value_type, fields=fields)
        with StatestoreClient(spec.options, transport=transport) as client, Lookup(spec, client) as lookup:
            result = lookup.lookup(keys)
        assert [v["name"] for v in result.values.to_pylist()] == [f"n{i}" for i in range(20)]
        assert transport.fields == [None if fields is None else "name"]
        sizes[fields] = transport.answer_bytes
    assert sizes[("name",)] * 10 < sizes[None]
