"""Run by ``test_arrow_arrays``: a real service answers an Arrow batch get in this fresh process,
which then says whether pandas was imported on the way."""

from __future__ import annotations

import io
import sys

import httpx
import pyarrow as pa

from service.app import create_app
from service.arrow_arrays import binary_array
from service.settings import Settings
from tests.service.conftest import product_store
from tests.support.server import serve_app


def main() -> None:
    settings = Settings(stores=[{"name": "products", "topic": "products", "value_format": "json"}])
    with serve_app(create_app(settings, {"products": product_store()})) as url:
        keys = pa.RecordBatch.from_arrays([binary_array([b"p1", b"nope"])], names=["key"])
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, keys.schema) as writer:
            writer.write_batch(keys)
        answer = httpx.post(
            f"{url}/v1/stores/products/keys:batchGet",
            content=sink.getvalue(),
            headers={"content-type": "application/vnd.apache.arrow.stream"},
            timeout=30,
        )
        answer.raise_for_status()
        values = pa.ipc.open_stream(answer.content).read_all().column("value").to_pylist()
        assert values == [b'{"name":"Pen"}', None], values
    print(f"pandas imported: {'pandas' in sys.modules}")


if __name__ == "__main__":
    main()
