"""The invoice example: products and customers (JSON dimensions), purchases referencing them.

Plain Python and pandas, no server code: the Spark tests of every PySpark version import it, and so
does the service they run against (which produces the records).
"""

from __future__ import annotations

import json

import pandas as pd

PRODUCT_SCHEMA = "name string, price double, category string"
CUSTOMER_SCHEMA = "name string, country string"


def product(i: int) -> dict[str, object]:
    return {"name": f"product {i}", "price": round(i * 1.25, 2), "category": f"cat{i % 4}", "unused": [i]}


def customer(i: int) -> dict[str, object]:
    return {"name": f"customer {i}", "country": ["FR", "DE", "NL"][i % 3]}


PRODUCTS = {f"p{i:03d}": product(i) for i in range(200)}
TOMBSTONED_PRODUCTS = [f"p{i:03d}" for i in range(180, 200)]
CUSTOMERS = {f"c{i:02d}": customer(i) for i in range(50)}
TOMBSTONED_CUSTOMERS = ["c48", "c49"]
BLOBS = {b"\x00\xff" + bytes([i]): bytes([i]) * 4 for i in range(30)}
BAD_PRODUCTS = {"bad1": {"name": 42, "price": "n/a"}, "bad2": [1, 2, 3]}

RICH_SCHEMA = (
    "name string, tags array<string>, size struct<w: double, h: double>, at timestamp, n bigint, ok boolean"
)
RICH_RECORDS = [
    (b"k%02d" % i, json.dumps(
        {"name": f"r{i}", "tags": [f"t{i}", "x"][: i % 3], "size": {"w": i / 4, "h": None}, "at":
         f"2024-0{1 + i % 9}-1{i % 10}T0{i % 10}:30:00Z", "n": 2**40 + i, "ok": i % 2 == 0}
    ).encode())
    for i in range(60)
] + [(b"k60", b"null"), (b"k61", b'{"name": "partial"}'), (b"k\xc3\xa9", b'{"name": "e"}')]  # fmt: skip
"""A store of nested, timestamp and wide integer values (``RICH_SCHEMA``), one key not ASCII."""
RICH_KEYS = [f"k{i:02d}" for i in range(64)] + ["ké", None, "absent"]
"""Keys asked of it: present, absent, null."""


def dimension_records(
    rows: dict[str, object], tombstoned: list[str]
) -> list[tuple[bytes | None, bytes | None]]:
    records: list[tuple[bytes | None, bytes | None]] = [
        (k.encode(), json.dumps(v).encode()) for k, v in rows.items()
    ]
    records += [(k.encode(), None) for k in tombstoned]
    return records


def purchases_frame(rows: int = 3000) -> pd.DataFrame:
    """Purchases referencing present, absent (p2xx, c5x), tombstoned and null keys."""
    return pd.DataFrame(
        {
            "purchase_id": range(rows),
            "product_id": [None if i % 97 == 0 else f"p{(i * 7) % 230:03d}" for i in range(rows)],
            "customer_id": [None if i % 89 == 0 else f"c{(i * 3) % 55:02d}" for i in range(rows)],
            "quantity": [1 + i % 5 for i in range(rows)],
        }
    )


def dimension_frame(
    rows: dict[str, object], tombstoned: list[str], key: str, prefix: str, fields: list[str]
) -> pd.DataFrame:
    live = {k: v for k, v in rows.items() if k not in tombstoned}
    return pd.DataFrame(
        {key: list(live), **{prefix + f: [v[f] for v in live.values()] for f in fields}}  # type: ignore[index]
    )


def expected_invoices(purchases: pd.DataFrame, how: str) -> pd.DataFrame:
    products = dimension_frame(
        PRODUCTS, TOMBSTONED_PRODUCTS, "product_id", "product_", ["name", "price", "category"]
    )
    customers = dimension_frame(
        CUSTOMERS, TOMBSTONED_CUSTOMERS, "customer_id", "customer_", ["name", "country"]
    )
    merged = purchases.merge(products, on="product_id", how=how).merge(customers, on="customer_id", how=how)
    return merged.sort_values("purchase_id").reset_index(drop=True)


def as_rows(frame: pd.DataFrame) -> list[tuple[object, ...]]:
    return [tuple(None if pd.isna(v) else v for v in row) for row in frame.itertuples(index=False)]


def live_product(key: str | None) -> dict[str, object] | None:
    """The product fields of ``value_schema`` a lookup of ``key`` gives (``None``: absent)."""
    if key is None or key not in PRODUCTS or key in TOMBSTONED_PRODUCTS:
        return None
    return {f: PRODUCTS[key][f] for f in ("name", "price", "category")}  # type: ignore[index]
