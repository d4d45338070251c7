"""``python -m bench formats --parts spark``: the service's batch gets counted per contender run."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench.formats_spark import CountedBatchGets, Traffic
from tests.support.server import serve_app


async def _answer(request: Request) -> Response:
    return Response(b"x" * int(request.query_params.get("size", "10")))


def test_batch_gets_are_counted_with_those_asking_fields_and_their_answered_bytes() -> None:
    app = Starlette(routes=[Route("/v1/stores/{store}/keys:batchGet", _answer, methods=["POST"]),
                            Route("/v1/stores/{store}", _answer)])  # fmt: skip
    traffic = Traffic()
    with serve_app(CountedBatchGets(app, traffic)) as url, httpx.Client(base_url=url) as client:
        client.post("/v1/stores/avro/keys:batchGet", params={"size": 100}).raise_for_status()
        client.post("/v1/stores/avro/keys:batchGet", params={"fields": "name,city", "size": 7})
        client.get("/v1/stores/avro", params={"size": 1000}).raise_for_status()  # not a batch get
        assert traffic.taken() == Traffic(requests=2, projected=1, answered_bytes=107)
        assert traffic == Traffic()  # taken: counted afresh from here
        client.post("/v1/stores/avro/keys:batchGet", params={"fields": "name", "size": 3})
    assert traffic == Traffic(requests=1, projected=1, answered_bytes=3)
